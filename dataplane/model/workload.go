package model

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
)

// WorkloadEndpoint is a workload endpoint as the controller describes it:
// identity, interface, addresses, and the tiers and profiles whose policy
// the engine resolves into an Endpoint.
type WorkloadEndpoint struct {
	ID       WorkloadID
	Iface    string
	MAC      net.HardwareAddr // nil when the controller sent none
	IPv4Nets []netip.Prefix
	IPv6Nets []netip.Prefix
	Tiers    []TierRef
	Profiles []string
}

// HostEndpoint is one of the node's own interfaces under policy: by name
// ("*" for all interfaces, "" to match by the expected addresses).
type HostEndpoint struct {
	ID             string
	Iface          string
	ExpectedIPv4   []netip.Addr
	ExpectedIPv6   []netip.Addr
	Profiles       []string
	Tiers          []TierRef
	UntrackedTiers []TierRef
	PreDNATTiers   []TierRef
	ForwardTiers   []TierRef
}

// Equal reports whether w and o describe the same endpoint. A nil MAC
// equals only a nil one (the controller sent none), as with every slice
// here: nil and empty compare equal, order matters.
func (w *WorkloadEndpoint) Equal(o *WorkloadEndpoint) bool {
	if w == nil || o == nil {
		return w == o
	}
	return w.ID == o.ID && w.Iface == o.Iface && (w.MAC == nil) == (o.MAC == nil) && bytes.Equal(w.MAC, o.MAC) &&
		slices.Equal(w.IPv4Nets, o.IPv4Nets) && slices.Equal(w.IPv6Nets, o.IPv6Nets) &&
		slices.Equal(w.Profiles, o.Profiles) && slices.EqualFunc(w.Tiers, o.Tiers, TierRef.Equal)
}

// Equal reports whether t and o are the same tier reference.
func (t TierRef) Equal(o TierRef) bool {
	return t.Name == o.Name && t.DefaultAction == o.DefaultAction &&
		slices.Equal(t.Ingress, o.Ingress) && slices.Equal(t.Egress, o.Egress)
}
