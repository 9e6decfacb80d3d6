package server

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// needsLinux is the answer to a kernel question on the memory dataplane.
func needsLinux(what string) error {
	return status.Errorf(codes.FailedPrecondition, "%s needs --dataplane=linux", what)
}

// Trace runs the endpoint's attached entry program on a crafted packet
// with the trace mark (no conntrack or counter writes) and explains the
// outcome.
func (s *inspectService) Trace(ctx context.Context, req *dpdv1.TraceRequest) (*dpdv1.TraceResponse, error) {
	if s.kernel == nil {
		return nil, needsLinux("trace")
	}
	ep, dir, pkt, err := s.traceInput(req)
	if err != nil {
		return nil, err
	}
	release, err := s.heavy.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := s.kernel.Trace(ep.Iface, dir, pkt.frame())
	switch {
	case errors.Is(err, engine.ErrNotProgrammed):
		return nil, status.Errorf(codes.FailedPrecondition, "endpoint %s is not programmed: interface %s is absent or not yet attached", ep.ID, ep.Iface)
	case err != nil:
		return nil, status.Errorf(codes.Internal, "trace: %v", err)
	}
	resp := explainTrace(res, dir)
	resp.Interface, resp.Ifindex = ep.Iface, int32(res.Ifindex)
	return resp, nil
}

// traceInput checks the request. A missing address on the endpoint's side
// defaults to the endpoint's first address of the packet's family.
func (s *inspectService) traceInput(req *dpdv1.TraceRequest) (engine.EndpointInfo, model.Direction, tracePacket, error) {
	var pkt tracePacket
	bad := func(f string, a ...any) error { return status.Errorf(codes.InvalidArgument, f, a...) }
	if req.GetEndpoint() == "" {
		return engine.EndpointInfo{}, 0, pkt, bad("endpoint is required")
	}
	ep, ok := s.engine.Endpoint(req.GetEndpoint())
	if !ok {
		var err error
		if ep, ok, err = s.hostTraceEndpoint(req.GetEndpoint()); err != nil {
			return ep, 0, pkt, err
		}
	}
	if !ok {
		return ep, 0, pkt, status.Errorf(codes.NotFound, "endpoint %q not found", req.GetEndpoint())
	}
	dir, err := parseDirection(req.GetDirection())
	if err != nil {
		return ep, 0, pkt, bad("%v", err)
	}
	if pkt.proto, err = parseProto(req.GetProtocol()); err != nil {
		return ep, 0, pkt, bad("%v", err)
	}
	src, dst := req.GetSrcIp(), req.GetDstIp()
	// The packet's family is that of the addresses given; the endpoint's
	// side, when not given, is the endpoint's first address of it.
	v6 := strings.Contains(src, ":") || strings.Contains(dst, ":")
	own := ownAddr(ep, v6)
	if src == "" && dir == model.Egress {
		src = own
	}
	if dst == "" && dir == model.Ingress {
		dst = own
	}
	for _, a := range []struct {
		name string
		s    string
		to   *netip.Addr
	}{{"src_ip", src, &pkt.src}, {"dst_ip", dst, &pkt.dst}} {
		addr, err := netip.ParseAddr(a.s)
		if err != nil || addr.Zone() != "" || addr.Is4In6() || addr.Is6() != v6 {
			fam := "IPv4"
			if v6 {
				fam = "IPv6"
			}
			return ep, 0, pkt, bad("%s %q: want an %s address (both addresses of one family)", a.name, a.s, fam)
		}
		*a.to = addr
	}
	if v6 && pkt.proto == protoICMP {
		pkt.proto = protoICMPv6 // "icmp" between IPv6 addresses
	}
	if req.GetSrcPort() > 65535 || req.GetDstPort() > 65535 {
		return ep, 0, pkt, bad("ports must be at most 65535")
	}
	if req.GetIcmpType() > 255 || req.GetIcmpCode() > 255 {
		return ep, 0, pkt, bad("icmp type and code must be at most 255")
	}
	pkt.sport, pkt.dport = uint16(req.GetSrcPort()), uint16(req.GetDstPort())
	pkt.icmpType, pkt.icmpCode = uint8(req.GetIcmpType()), uint8(req.GetIcmpCode())
	if req.IcmpType == nil {
		pkt.icmpType = 8 // a ping unless told otherwise
		if v6 {
			pkt.icmpType = 128
		}
	}
	return ep, dir, pkt, nil
}

// ownAddr is the endpoint's first address of the family, "" when it has
// none (the address must then be given).
func ownAddr(ep engine.EndpointInfo, v6 bool) string {
	nets := ep.IPv4Nets
	if v6 {
		nets = ep.IPv6Nets
	}
	if len(nets) > 0 {
		if p, err := netip.ParsePrefix(nets[0]); err == nil {
			return p.Addr().String()
		}
	}
	return ""
}

// parseDirection reads "ingress" (to the workload) or "egress" (from it).
func parseDirection(s string) (model.Direction, error) {
	switch strings.ToLower(s) {
	case "ingress", "in", "to":
		return model.Ingress, nil
	case "egress", "out", "from":
		return model.Egress, nil
	}
	return 0, fmt.Errorf("direction %q: want ingress (to the workload) or egress (from it)", s)
}

// explainTrace turns the outcome of a trace run into a verdict and the
// deciding rule.
func explainTrace(res model.TraceResult, dir model.Direction) *dpdv1.TraceResponse {
	if res.Host {
		if resp, ok := explainHostTrace(res, dir); ok {
			return resp
		}
	}
	return explainWorkloadTrace(res, dir)
}

// explainWorkloadTrace explains what workload and host interfaces share.
func explainWorkloadTrace(res model.TraceResult, dir model.Direction) *dpdv1.TraceResponse {
	resp := &dpdv1.TraceResponse{TcReturn: int32(res.Return), Verdict: "deny"}
	switch res.Stage {
	case model.TraceNoBackend:
		resp.DecidedBy = "service: no backend"
		resp.Explanation = "deny: the destination is a service frontend without a ready backend"
		return resp
	case model.TraceNotReady:
		resp.DecidedBy = "not ready"
		resp.Explanation = "deny: the interface is not ready (attached but not yet policed), so every packet is dropped"
		return resp
	case model.TraceNoPolicy:
		resp.DecidedBy = "no policy"
		resp.PolicyVerdict = "deny"
		resp.Explanation = "deny: no policy program is installed for " + dir.String()
	case model.TraceIncomplete:
		resp.DecidedBy = "policy"
		resp.PolicyVerdict = "deny"
		resp.Explanation = "deny: the policy program dropped the packet before deciding (a missing program chunk)"
	default:
		resp.PolicyVerdict, resp.DecidedBy, resp.Rule = decision(res.Stage, res.Allowed, res.RuleID, res.Rule, res.RuleFound, dir)
		resp.Verdict = resp.PolicyVerdict
		switch {
		case res.RuleFound:
			resp.Explanation = resp.PolicyVerdict + ": " + describeRule(res.Rule)
		case res.RuleID != 0:
			resp.Explanation = fmt.Sprintf("%s: rule with counter id %x (not in the installed program's table; the policy changed meanwhile?)", resp.PolicyVerdict, res.RuleID)
		default:
			resp.Explanation = resp.PolicyVerdict + " by the policy program"
		}
	}
	if res.Conntrack != "" {
		newFlow := resp.Explanation
		resp.Verdict, resp.DecidedBy = "allow", "conntrack: "+res.Conntrack
		resp.Explanation = fmt.Sprintf("allow: %s flow in conntrack; as a new flow: %s", res.Conntrack, newFlow)
	}
	if res.Exempt != "" {
		policy := resp.Explanation
		resp.Verdict, resp.DecidedBy = "allow", "exempt: "+res.Exempt
		resp.Explanation = fmt.Sprintf("allow: ICMPv6 %s passes without policy; the policy would say: %s", res.Exempt, policy)
	}
	return resp
}

func describeRule(r model.RuleInfo) string {
	switch r.Synthetic {
	case model.SyntheticTierDefault:
		return fmt.Sprintf("no policy in tier %q matched; the tier's default action (%s) decided", r.Tier, r.Action)
	case model.SyntheticNoMatch:
		return "no policy or profile matched; what nothing allows is dropped"
	}
	where := fmt.Sprintf("%s %q", r.Kind, r.Policy)
	if r.Tier != "" {
		where += fmt.Sprintf(" in tier %q", r.Tier)
	}
	return fmt.Sprintf("rule %d (id %s, %s) of %s", r.Index, r.RuleID, r.Action, where)
}

func ruleRef(r model.RuleInfo, dir model.Direction) *dpdv1.RuleRef {
	return &dpdv1.RuleRef{
		CounterId: r.CounterID,
		Direction: dir.String(),
		Tier:      r.Tier,
		Policy:    r.Policy,
		Kind:      r.Kind,
		Index:     int32(r.Index),
		RuleId:    r.RuleID,
		Action:    r.Action.String(),
		Synthetic: r.Synthetic,
	}
}
