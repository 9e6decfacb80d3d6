package model

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
)

// Direction of a hook, from the workload's point of view.
type Direction uint8

const (
	// Egress is traffic leaving the workload (host-side TC ingress).
	Egress Direction = 0
	// Ingress is traffic entering the workload (host-side TC egress).
	Ingress Direction = 1
)

func (d Direction) String() string {
	if d == Ingress {
		return "ingress"
	}
	return "egress"
}

// WorkloadID identifies a workload endpoint as Felix does.
type WorkloadID struct {
	Orchestrator, Workload, Endpoint string
}

func (id WorkloadID) String() string {
	return id.Orchestrator + "/" + id.Workload + "/" + id.Endpoint
}

// Endpoint is a workload endpoint with its policy resolved: what a kernel
// must make true on the endpoint's interface.
type Endpoint struct {
	ID       WorkloadID
	Iface    string
	MAC      net.HardwareAddr
	IPv4Nets []netip.Prefix
	IPv6Nets []netip.Prefix
	Ingress  DirectionPolicy
	Egress   DirectionPolicy
	// Forward, Untracked and PreDNAT are a host endpoint's extra stages
	// (nil: none, and always for workloads).
	Forward, Untracked, PreDNAT *HostStage
	// PreviewIngress and PreviewEgress, when the engine previews staged
	// policies and the direction has any, are the direction's policy with
	// its staged policies enforced in their tier order: what they would
	// decide, reported beside the real verdict and never enforced.
	PreviewIngress, PreviewEgress *DirectionPolicy
	// PolicyGroup, when not empty, names the policy references the engine
	// resolved the endpoint's policies (and previews) from: endpoints of
	// one group always enforce the same thing, so a kernel may install
	// their policies once for all of them, and switch them all with one
	// write when the group's policy changes. Empty: no group.
	PolicyGroup string
}

// Preview returns the staged preview for direction d, nil if none.
func (e *Endpoint) Preview(d Direction) *DirectionPolicy {
	if d == Ingress {
		return e.PreviewIngress
	}
	return e.PreviewEgress
}

// SameInterface reports whether e and o ask the same of their interface
// besides policy: name, MAC and addresses.
func (e *Endpoint) SameInterface(o *Endpoint) bool {
	return e != nil && o != nil && e.Iface == o.Iface && bytes.Equal(e.MAC, o.MAC) &&
		slices.Equal(e.IPv4Nets, o.IPv4Nets) && slices.Equal(e.IPv6Nets, o.IPv6Nets)
}

// Policy returns the policy for direction d.
func (e *Endpoint) Policy(d Direction) *DirectionPolicy {
	if d == Ingress {
		return &e.Ingress
	}
	return &e.Egress
}

// LinkState is what a kernel knows of an interface.
type LinkState uint8

const (
	LinkAbsent LinkState = iota
	LinkDown
	LinkUp
)

func (s LinkState) String() string {
	switch s {
	case LinkDown:
		return "down"
	case LinkUp:
		return "up"
	}
	return "absent"
}

// LinkUpdate reports a change of an interface, from the kernel's monitor.
type LinkUpdate struct {
	Name  string
	State LinkState
}

// ReferencedSets lists, sorted and unique, every IP set either direction
// of e's policy uses; nil when none does. A kernel must have them all
// programmed before it applies e.
func (e *Endpoint) ReferencedSets() []string {
	return ReferencedSets(append(e.Ingress.ruleLists(), e.Egress.ruleLists()...)...)
}
