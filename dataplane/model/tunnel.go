package model

import (
	"net"
	"net/netip"
)

// VTEP is a node's VXLAN tunnel endpoint (felix VXLANTunnelEndpointUpdate):
// the MAC and address of its VXLAN device and the underlay address the
// tunnel runs over, for each family the node tunnels (IPv6 pools use a
// second device, with its own MAC, over the node's IPv6 address). The VTEP
// of the local node configures the local devices; the others become
// forwarding and neighbour entries on them.
type VTEP struct {
	Node           string
	MAC            net.HardwareAddr
	IPv4Addr       netip.Addr // the device's tunnel address
	ParentDeviceIP netip.Addr // underlay address of the node

	MACV6            net.HardwareAddr // nil when the node has no IPv6 VTEP
	IPv6Addr         netip.Addr       // the IPv6 device's tunnel address
	ParentDeviceIPv6 netip.Addr       // IPv6 underlay address of the node
}

// HostMetadata is a node's addresses (felix HostMetadataUpdate). Kernels
// use it to reach a node when a route carries no dst_node_ip.
type HostMetadata struct {
	Hostname string
	IPv4Addr netip.Addr // invalid when unknown
	IPv6Addr netip.Addr // invalid when unknown
}
