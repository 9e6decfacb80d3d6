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
