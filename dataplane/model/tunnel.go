package model

import (
	"net"
	"net/netip"
)

// VTEP is a node's VXLAN tunnel endpoint (felix VXLANTunnelEndpointUpdate):
// the MAC and address of its VXLAN device and the underlay address the
// tunnel runs over. The VTEP of the local node configures the local device;
// the others become forwarding and neighbour entries on it.
type VTEP struct {
	Node           string
	MAC            net.HardwareAddr
	IPv4Addr       netip.Addr // the device's tunnel address
	ParentDeviceIP netip.Addr // underlay address of the node
}

// HostMetadata is a node's addresses (felix HostMetadataUpdate). Kernels
// use it to reach a node when a route carries no dst_node_ip.
type HostMetadata struct {
	Hostname string
	IPv4Addr netip.Addr // invalid when unknown
	IPv6Addr netip.Addr // invalid when unknown
}
