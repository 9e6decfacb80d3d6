package model

import "net/netip"

// HostLinkUpdate reports one of the node's interfaces, any name, with the
// addresses it carries, from the kernel's host link monitor. Host
// endpoints bind interfaces by name, by address or by wildcard from these.
type HostLinkUpdate struct {
	Name  string
	State LinkState // LinkAbsent: the interface is gone
	Addrs []netip.Addr
}

// HostEndpointOrchestrator is the WorkloadID.Orchestrator of the
// model.Endpoint a kernel enforces for one interface a host endpoint binds:
// Workload is the host endpoint's id, Endpoint the interface.
const HostEndpointOrchestrator = "hostendpoint"

// HostIfaceID names the enforcement of host endpoint id on iface.
func HostIfaceID(id, iface string) WorkloadID {
	return WorkloadID{Orchestrator: HostEndpointOrchestrator, Workload: id, Endpoint: iface}
}

// HostStage is one of a host endpoint's extra policy stages, per
// direction: forward (Felix's forward_tiers, applyOnForward: traffic the
// host forwards through the interface), untracked (untracked_tiers,
// doNotTrack: before conntrack, allowed packets are not tracked) or
// pre-DNAT (pre_dnat_tiers: new flows entering through the interface,
// ingress only). A direction no tier of the stage has policies for is
// not evaluated (Has* false).
type HostStage struct {
	Ingress, Egress       DirectionPolicy
	HasIngress, HasEgress bool
}

// Policy returns the forward policy for direction d and whether there is one.
func (f *HostStage) Policy(d Direction) (*DirectionPolicy, bool) {
	if f == nil {
		return nil, false
	}
	if d == Ingress {
		return &f.Ingress, f.HasIngress
	}
	return &f.Egress, f.HasEgress
}

// SameStage reports whether a and b enforce the same forward policy.
func SameStage(a, b *HostStage) bool {
	for _, d := range []Direction{Ingress, Egress} {
		pa, oka := a.Policy(d)
		pb, okb := b.Policy(d)
		if oka != okb || (oka && pa.Hash() != pb.Hash()) {
			return false
		}
	}
	return true
}
