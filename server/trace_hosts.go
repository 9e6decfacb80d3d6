package server

import (
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// hostTraceOrch is the orchestrator part of the endpoint a host interface
// is traced as: "hostendpoint/<id>/<iface>".
const hostTraceOrch = "hostendpoint"

// hostTraceEndpoint resolves a trace's endpoint to a host interface: a
// host endpoint id binding one interface, or "<id>/<iface>" naming one of
// those it binds. The host endpoint's expected addresses are its own (the
// defaults of the packet's host side). ok false: no such host endpoint.
func (s *inspectService) hostTraceEndpoint(name string) (engine.EndpointInfo, bool, error) {
	l, isLister := s.engine.(hostEndpointLister)
	if !isLister {
		return engine.EndpointInfo{}, false, nil
	}
	find := func(id string) (engine.HostEndpointInfo, bool) {
		for _, h := range l.HostEndpoints() {
			if h.ID == id {
				return h, true
			}
		}
		return engine.HostEndpointInfo{}, false
	}
	h, ok := find(name)
	iface := ""
	switch {
	case ok && len(h.Ifaces) == 1:
		iface = h.Ifaces[0]
	case ok:
		return engine.EndpointInfo{}, true, status.Errorf(codes.InvalidArgument,
			"host endpoint %q binds %d interfaces %v: name one as %s/<interface>", name, len(h.Ifaces), h.Ifaces, name)
	default:
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return engine.EndpointInfo{}, false, nil
		}
		if h, ok = find(name[:i]); !ok {
			return engine.EndpointInfo{}, false, nil
		}
		if iface = name[i+1:]; !slices.Contains(h.Ifaces, iface) {
			return engine.EndpointInfo{}, true, status.Errorf(codes.NotFound,
				"host endpoint %q does not bind interface %q (it binds %v)", h.ID, iface, h.Ifaces)
		}
	}
	ep := engine.EndpointInfo{ID: model.WorkloadID{Orchestrator: hostTraceOrch, Workload: h.ID, Endpoint: iface},
		Iface: iface, Status: h.Status, Reason: h.Reason, Tiers: h.Tiers, ProfileIDs: h.ProfileIDs}
	for _, a := range h.Expect {
		if addr, err := netip.ParseAddr(a); err == nil {
			if addr.Is4() {
				ep.IPv4Nets = append(ep.IPv4Nets, netip.PrefixFrom(addr, 32).String())
			} else {
				ep.IPv6Nets = append(ep.IPv6Nets, netip.PrefixFrom(addr, 128).String())
			}
		}
	}
	return ep, true, nil
}

// explainHostTrace is what differs on a host interface, which is never
// failed closed: unpoliced packets pass, as do those no program polices,
// and failsafe ports and neighbour discovery pass before any policy (the
// trace still shows what the policy would say). ok false: explain as a
// workload.
func explainHostTrace(res model.TraceResult, dir model.Direction) (*dpdv1.TraceResponse, bool) {
	resp := &dpdv1.TraceResponse{TcReturn: int32(res.Return), Verdict: "allow"}
	switch {
	case res.Exempt != "":
		inner := res
		inner.Exempt = ""
		policy := explainTrace(inner, dir)
		what := map[string]string{
			"failsafe port":       "a failsafe port (FailsafeInboundHostPorts/FailsafeOutboundHostPorts)",
			"neighbour discovery": "ICMPv6 neighbour discovery, router advertisement or MLD",
		}[res.Exempt]
		if what == "" {
			what = res.Exempt
		}
		resp.DecidedBy = "exempt: " + res.Exempt
		resp.PolicyVerdict, resp.Rule = policy.GetPolicyVerdict(), policy.GetRule()
		resp.Explanation = "allow: " + what + " passes host interfaces before any policy; the policy would say: " + policy.GetExplanation()
	case res.Stage == model.TraceNotReady:
		resp.DecidedBy = "unpoliced"
		resp.Explanation = "allow: the host interface does not police this packet (no host endpoint is enforced on it, " +
			"or it is neither IPv4 nor IPv6); host interfaces are never failed closed"
	case res.Stage == model.TraceNoPolicy && res.Conntrack == "":
		resp.DecidedBy = "no policy"
		resp.PolicyVerdict = "allow"
		resp.Explanation = "allow: no policy polices this packet on the host interface for " + dir.String() +
			" (forwarded traffic without forward policy, or no program installed); host interfaces are never failed closed"
	default:
		return nil, false
	}
	return resp, true
}
