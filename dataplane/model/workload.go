package model

import (
	"net"
	"net/netip"
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
