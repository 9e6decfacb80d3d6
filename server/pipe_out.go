package server

import (
	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/proto/felix"
)

// forFelix returns what of m goes to Felix on fd 4, nil for nothing.
// Felix's external-driver reader (every version from v3.28 to master)
// handles process status, workload and host endpoint status updates and
// removals, and WireguardStatusUpdate; anything else it logs twice as an
// unknown message (once in the reader, once in the daemon) and drops. So
// by default DataplaneInSync and dpd's extensions (HappyEndpointsReport)
// are not sent; extensions sends them too, for a Felix built to read them.
//
// A workload status's endpoint goes without its tiers: Felix reads only
// the name, MAC, addresses and BGP peer from it, and a Felix of v3.30 or
// v3.31 would read current-form tiers (PolicyIDs) as strings, which fails
// its whole decode (and stops Felix) when a length byte is not UTF-8.
func forFelix(m *felix.FromDataplane, extensions bool) *felix.FromDataplane {
	switch p := m.GetPayload().(type) {
	case *felix.FromDataplane_ProcessStatusUpdate, *felix.FromDataplane_HostEndpointStatusUpdate,
		*felix.FromDataplane_HostEndpointStatusRemove, *felix.FromDataplane_WorkloadEndpointStatusRemove,
		*felix.FromDataplane_WireguardStatusUpdate:
		return m
	case *felix.FromDataplane_WorkloadEndpointStatusUpdate:
		u := p.WorkloadEndpointStatusUpdate
		if len(u.GetEndpoint().GetTiers()) == 0 {
			return m
		}
		ep := proto.CloneOf(u.Endpoint)
		ep.Tiers = nil
		return &felix.FromDataplane{SequenceNumber: m.SequenceNumber, Payload: &felix.FromDataplane_WorkloadEndpointStatusUpdate{
			WorkloadEndpointStatusUpdate: &felix.WorkloadEndpointStatusUpdate{Id: u.Id, Status: u.Status, Endpoint: ep}}}
	}
	if extensions {
		return m
	}
	return nil
}
