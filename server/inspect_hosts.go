package server

import (
	"context"

	"github.com/dpd-dev/dpd/dataplane/engine"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// hostEndpointLister is the engine's view of host endpoints.
type hostEndpointLister interface {
	HostEndpoints() []engine.HostEndpointInfo
}

// ListHostEndpoints lists the host endpoints, each interface they bind
// with what the kernel programmed there.
func (s *inspectService) ListHostEndpoints(context.Context, *dpdv1.ListHostEndpointsRequest) (*dpdv1.ListHostEndpointsResponse, error) {
	resp := &dpdv1.ListHostEndpointsResponse{}
	l, ok := s.engine.(hostEndpointLister)
	if !ok {
		return resp, nil
	}
	for _, h := range l.HostEndpoints() {
		out := &dpdv1.HostEndpoint{Id: h.ID, Name: h.Name, ExpectedIps: h.Expect, Status: h.Status,
			Reason: h.Reason, Tiers: h.Tiers, ProfileIds: h.ProfileIDs}
		for _, iface := range h.Ifaces {
			hi := &dpdv1.HostInterface{Name: iface}
			if s.eps != nil {
				if det, ok := s.eps.EndpointDetails(iface); ok {
					hi.Ifindex, hi.AttachMode, hi.KernelReady = int32(det.Ifindex), det.AttachMode, det.Ready
					hi.IngressProgram, hi.EgressProgram = det.IngressProgram, det.EgressProgram
				}
			}
			out.Interfaces = append(out.Interfaces, hi)
		}
		resp.HostEndpoints = append(resp.HostEndpoints, out)
	}
	return resp, nil
}
