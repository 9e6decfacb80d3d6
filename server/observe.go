package server

import (
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// maxObservers bounds the concurrent Observe streams: each holds a
// subscriber buffer of observeBuffer events.
const (
	maxObservers  = 64
	observeBuffer = 1024
)

// peerRefresh is how stale the address-to-endpoint index of a stream may
// get before a flow of an unknown address rebuilds it.
const peerRefresh = time.Second

var observers atomic.Int32

// Observe streams the kernel's flow events from its history and, with
// follow, as they happen.
func (s *inspectService) Observe(req *dpdv1.ObserveRequest, stream dpdv1.Inspect_ObserveServer) error {
	fo, ok := s.kernel.(engine.FlowObserver)
	if !ok {
		return needsLinux("observe")
	}
	f, err := s.observeFilter(req)
	if err != nil {
		return err
	}
	if observers.Add(1) > maxObservers {
		observers.Add(-1)
		return status.Errorf(codes.ResourceExhausted, "more than %d Observe streams; retry later", maxObservers)
	}
	defer observers.Add(-1)

	var since time.Time
	if req.GetSince() != nil {
		since = req.GetSince().AsTime()
	}
	backlog, sub := fo.ObserveFlows(since, int(req.GetLast()), req.GetFollow(), observeBuffer)
	if sub != nil {
		defer sub.Close()
	}
	peers := &peerIndex{eng: s.engine}
	send := func(ev *model.FlowEvent) error {
		var resp dpdv1.ObserveResponse
		resp.Lost = ev.Lost
		if f.match(ev, peers) {
			resp.Flow = flowMessage(ev, peers)
		}
		if resp.Flow == nil && resp.Lost == 0 {
			return nil
		}
		return stream.Send(&resp)
	}
	for i := range backlog {
		if err := send(&backlog[i]); err != nil {
			return err
		}
	}
	if sub == nil {
		return nil
	}
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case ev, ok := <-sub.Events():
			if !ok {
				return status.Error(codes.Unavailable, "the dataplane closed")
			}
			if err := send(&ev); err != nil {
				return err
			}
		}
	}
}

// flowFilter is a checked ObserveRequest.
type flowFilter struct {
	iface     string
	addrs     map[netip.Addr]bool // the endpoint filter's addresses
	namespace string
	verdict   string
	policy    string
	port      uint16
	proto     int    // -1: any
	kind      string // "new", "end" or "" for both
	differs   bool   // only flows whose staged preview differs from the verdict
	labels    []labelTerm
	labeler   namespaceLabeler // nil: the engine knows no labels
}

func (s *inspectService) observeFilter(req *dpdv1.ObserveRequest) (*flowFilter, error) {
	bad := func(f string, a ...any) error { return status.Errorf(codes.InvalidArgument, f, a...) }
	f := &flowFilter{namespace: req.GetNamespace(), policy: req.GetPolicy(), proto: -1, differs: req.GetStagedDiffers()}
	if id := req.GetEndpoint(); id != "" {
		ep, ok := s.engine.Endpoint(id)
		if !ok {
			return nil, status.Errorf(codes.NotFound, "endpoint %q not found", id)
		}
		f.iface, f.addrs = ep.Iface, map[netip.Addr]bool{}
		for _, n := range ep.IPv4Nets {
			if p, err := netip.ParsePrefix(n); err == nil {
				f.addrs[p.Addr()] = true
			}
		}
	}
	switch v := strings.ToLower(req.GetVerdict()); v {
	case "", "allow", "deny":
		f.verdict = v
	case "allowed", "forwarded":
		f.verdict = "allow"
	case "denied", "dropped", "drop":
		f.verdict = "deny"
	default:
		return nil, bad("verdict %q: want allow or deny", req.GetVerdict())
	}
	if len(req.GetLabels()) > 0 {
		terms, err := parseLabelTerms(req.GetLabels())
		if err != nil {
			return nil, bad("%v", err)
		}
		nl, ok := s.engine.(namespaceLabeler)
		if !ok {
			return nil, status.Error(codes.Unimplemented, "this engine knows no namespace labels")
		}
		f.labels, f.labeler = terms, nl
	}
	switch k := strings.ToLower(req.GetType()); k {
	case "", "new", "end":
		f.kind = k
	case "ended":
		f.kind = "end"
	default:
		return nil, bad("type %q: want new or end", req.GetType())
	}
	if req.GetPort() > 65535 {
		return nil, bad("port must be at most 65535")
	}
	f.port = uint16(req.GetPort())
	if req.GetProtocol() != "" {
		p, err := parseProto(req.GetProtocol())
		if err != nil {
			return nil, bad("%v", err)
		}
		f.proto = int(p)
	}
	return f, nil
}

func (f *flowFilter) match(ev *model.FlowEvent, peers *peerIndex) bool {
	if f.proto >= 0 && int(ev.Proto) != f.proto {
		return false
	}
	if f.kind != "" && (f.kind == "end") != ev.End {
		return false
	}
	if f.differs && (!ev.Staged || ev.StagedAllowed == (ev.Allowed && ev.Stage == model.TraceDecided)) {
		return false
	}
	if f.port != 0 && ev.Src.Port() != f.port && ev.Dst.Port() != f.port && ev.Frontend.Port() != f.port {
		return false
	}
	if f.verdict != "" && (f.verdict == "allow") != (ev.Allowed && ev.Stage == model.TraceDecided) {
		return false
	}
	if f.policy != "" && (!ev.RuleFound || !policyMatches(ev.Rule, f.policy)) {
		return false
	}
	if f.addrs != nil && ev.Iface != f.iface && !f.addrs[ev.Src.Addr()] && !f.addrs[ev.Dst.Addr()] {
		return false
	}
	if f.namespace != "" {
		src, dst := peers.sides(ev)
		if namespaceOf(src) != f.namespace && namespaceOf(dst) != f.namespace {
			return false
		}
	}
	if len(f.labels) > 0 {
		src, dst := peers.sides(ev)
		if !labelsMatch(f.labels, f.labeler, src) && !labelsMatch(f.labels, f.labeler, dst) {
			return false
		}
	}
	return true
}

// policyMatches: want names the rule's policy or profile, in full, with
// its tier in front, or without the prefix that names its tier or kind
// ("web" for "default/web" or "GlobalNetworkPolicy:web").
func policyMatches(r model.RuleInfo, want string) bool {
	p := r.Policy
	return p != "" && (p == want || r.Tier+"/"+p == want ||
		strings.HasSuffix(p, "/"+want) || strings.HasSuffix(p, ":"+want))
}

// namespaceOf is the namespace of a Kubernetes workload id
// ("namespace/pod"), "" for others.
func namespaceOf(ep *engine.EndpointInfo) string {
	if ep == nil {
		return ""
	}
	ns, _, ok := strings.Cut(ep.ID.Workload, "/")
	if !ok {
		return ""
	}
	return ns
}

// peerIndex maps addresses and interfaces to local endpoints, rebuilt from
// the engine's list when a flow names one it does not know and the index
// is older than peerRefresh. One per stream; not shared.
type peerIndex struct {
	eng     Engine
	built   time.Time
	byAddr  map[netip.Addr]*engine.EndpointInfo
	byIface map[string]*engine.EndpointInfo
}

func (p *peerIndex) rebuild() {
	p.built = time.Now()
	p.byAddr, p.byIface = map[netip.Addr]*engine.EndpointInfo{}, map[string]*engine.EndpointInfo{}
	eps := p.eng.Endpoints()
	for i := range eps {
		ep := &eps[i]
		if ep.Iface != "" {
			p.byIface[ep.Iface] = ep
		}
		for _, n := range ep.IPv4Nets {
			if pf, err := netip.ParsePrefix(n); err == nil {
				p.byAddr[pf.Addr()] = ep
			}
		}
	}
}

func (p *peerIndex) lookup(a netip.Addr, iface string) *engine.EndpointInfo {
	if p.byAddr == nil {
		p.rebuild()
	}
	if ep := p.byIface[iface]; iface != "" && ep != nil {
		return ep
	}
	if ep, ok := p.byAddr[a]; ok {
		return ep
	}
	if time.Since(p.built) > peerRefresh {
		p.rebuild()
		return p.byAddr[a]
	}
	return nil
}

// sides are the local endpoints of a flow's source and destination: the
// policed interface's own side by interface, the other by address.
func (p *peerIndex) sides(ev *model.FlowEvent) (src, dst *engine.EndpointInfo) {
	srcIface, dstIface := ev.Iface, ""
	if ev.Direction == model.Ingress {
		srcIface, dstIface = "", ev.Iface
	}
	return p.lookup(ev.Src.Addr(), srcIface), p.lookup(ev.Dst.Addr(), dstIface)
}

func flowMessage(ev *model.FlowEvent, peers *peerIndex) *dpdv1.Flow {
	verdict, by, ref := decision(ev.Stage, ev.Allowed, ev.RuleID, ev.Rule, ev.RuleFound, ev.Direction)
	src, dst := peers.sides(ev)
	peer := func(ap netip.AddrPort, ep *engine.EndpointInfo) *dpdv1.FlowPeer {
		fp := &dpdv1.FlowPeer{Ip: ap.Addr().String(), Port: uint32(ap.Port())}
		if ep != nil {
			fp.Endpoint = ep.ID.String()
		}
		return fp
	}
	m := &dpdv1.Flow{
		Time: timestamppb.New(ev.Time), Interface: ev.Iface, Ifindex: int32(ev.Ifindex),
		Direction: ev.Direction.String(), Protocol: protoName(ev.Proto),
		Source: peer(ev.Src, src), Destination: peer(ev.Dst, dst),
		Verdict: verdict, DecidedBy: by, Rule: ref, Suppressed: ev.Suppressed,
		IcmpType: uint32(ev.ICMPType), IcmpCode: uint32(ev.ICMPCode), Seq: ev.Seq,
	}
	if ev.Frontend.IsValid() {
		m.ServiceIp, m.ServicePort = ev.Frontend.Addr().String(), uint32(ev.Frontend.Port())
	}
	if ev.Staged {
		var ref *dpdv1.RuleRef
		m.StagedVerdict, m.StagedDecidedBy, ref = decision(model.TraceDecided, ev.StagedAllowed, ev.StagedRuleID,
			ev.StagedRule, ev.StagedRuleFound, ev.Direction)
		m.StagedRule = ref
	}
	if ev.End {
		m.Ended, m.EndReason = true, string(ev.EndReason)
		if !ev.Started.IsZero() {
			m.Started = timestamppb.New(ev.Started)
		}
		m.Forward = &dpdv1.FlowCounts{Packets: ev.Forward.Packets, Bytes: ev.Forward.Bytes}
		m.Reply = &dpdv1.FlowCounts{Packets: ev.Reply.Packets, Bytes: ev.Reply.Bytes}
	}
	return m
}
