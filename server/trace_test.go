package server

import (
	"context"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

func TestTracePacketChecksums(t *testing.T) {
	src, dst := netip.MustParseAddr("10.65.0.1"), netip.MustParseAddr("10.65.0.2")
	for _, p := range []tracePacket{
		{proto: protoTCP, src: src, dst: dst, sport: 40000, dport: 8080},
		{proto: protoUDP, src: src, dst: dst, sport: 53, dport: 5353},
		{proto: protoICMP, src: src, dst: dst, icmpType: 8},
		{proto: 47, src: src, dst: dst},
	} {
		checkTraceFrame4(t, p)
	}
	src6, dst6 := netip.MustParseAddr("fd00:65::1"), netip.MustParseAddr("fd00:65::2")
	for _, p := range []tracePacket{
		{proto: protoTCP, src: src6, dst: dst6, sport: 40000, dport: 8080},
		{proto: protoUDP, src: src6, dst: dst6, sport: 53, dport: 5353},
		{proto: protoICMPv6, src: src6, dst: dst6, icmpType: 128},
	} {
		f := p.frame()
		if binary.BigEndian.Uint16(f[12:]) != 0x86dd || f[14]>>4 != 6 || f[20] != p.proto ||
			int(binary.BigEndian.Uint16(f[18:])) != len(f)-54 {
			t.Fatalf("proto %d: bad IPv6 headers % x", p.proto, f[:54])
		}
		if c := l4Checksum(p, f[54:]); c != 0 && (p.proto != protoUDP || c != 0xffff) {
			t.Errorf("proto %d: IPv6 L4 checksum does not verify (%#x)", p.proto, c)
		}
	}
}

// checkTraceFrame4 checks an IPv4 trace packet's headers and checksums.
func checkTraceFrame4(t *testing.T, p tracePacket) {
	t.Helper()
	f := p.frame()
	if binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[14] != 0x45 || f[23] != p.proto {
		t.Fatalf("proto %d: bad headers % x", p.proto, f[:34])
	}
	if c := checksum(f[14:34], 0); c != 0 {
		t.Errorf("proto %d: IPv4 header checksum does not verify (%#x)", p.proto, c)
	}
	l4 := f[34:]
	switch p.proto {
	case protoTCP, protoUDP:
		// Summing the segment with its checksum and the pseudo-header
		// gives zero when the checksum is right.
		if c := l4Checksum(p, l4); c != 0 && (p.proto != protoUDP || c != 0xffff) {
			t.Errorf("proto %d: L4 checksum does not verify (%#x)", p.proto, c)
		}
		if binary.BigEndian.Uint16(l4[2:]) != p.dport {
			t.Errorf("proto %d: dport % x", p.proto, l4[:4])
		}
	case protoICMP:
		if checksum(l4, 0) != 0 || l4[0] != 8 {
			t.Errorf("icmp: % x", l4)
		}
	}
}

func TestExplainTrace(t *testing.T) {
	rules := []model.RuleInfo{
		{CounterID: 11, Tier: "default", Policy: "default/web", Kind: "policy", Index: 0, RuleID: "r0", Action: model.ActionAllow},
		{CounterID: 12, Tier: "default", Policy: "default/web", Kind: "policy", Index: 1, RuleID: "r1", Action: model.ActionDeny},
		{CounterID: 13, Tier: "default", Index: -1, Action: model.ActionDeny, Synthetic: model.SyntheticTierDefault},
		{CounterID: 14, Index: -1, Action: model.ActionDeny, Synthetic: model.SyntheticNoMatch},
	}
	decided := func(allow bool, rule uint64, ct string) model.TraceResult {
		r := model.TraceResult{Stage: model.TraceDecided, Allowed: allow, RuleID: rule, Conntrack: ct}
		for _, ri := range rules {
			if ri.CounterID == rule {
				r.Rule, r.RuleFound = ri, true
			}
		}
		return r
	}
	tests := []struct {
		name                      string
		res                       model.TraceResult
		verdict, decidedBy, inExp string
		ruleID                    string
	}{
		{"not ready", model.TraceResult{Return: 2, Stage: model.TraceNotReady}, "deny", "not ready", "not ready", ""},
		{"no backend", model.TraceResult{Stage: model.TraceNoBackend}, "deny", "service: no backend", "without a ready backend", ""},
		{"no policy", model.TraceResult{Stage: model.TraceNoPolicy}, "deny", "no policy", "no policy program", ""},
		{"incomplete", model.TraceResult{Stage: model.TraceIncomplete}, "deny", "policy", "before deciding", ""},
		{"allowed by rule 0", decided(true, 11, ""), "allow", "policy", `rule 0 (id r0, allow) of policy "default/web" in tier "default"`, "r0"},
		{"denied by rule 1", decided(false, 12, ""), "deny", "policy", `rule 1 (id r1, deny)`, "r1"},
		{"tier default", decided(false, 13, ""), "deny", "tier-default", `tier "default" matched`, ""},
		{"no match", decided(false, 14, ""), "deny", "no-match", "no policy or profile matched", ""},
		{"established flow", decided(false, 12, "established"), "allow", "conntrack: established", "as a new flow: deny: rule 1", "r1"},
		{"reply", decided(false, 14, "reply"), "allow", "conntrack: reply", "reply flow", ""},
		{"related icmp", model.TraceResult{Stage: model.TraceNoPolicy, Conntrack: "related"}, "allow", "conntrack: related", "related", ""},
		{"unknown rule", decided(false, 99, ""), "deny", "policy", "not in the installed program", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := explainTrace(tt.res, model.Ingress)
			if got.GetVerdict() != tt.verdict || got.GetDecidedBy() != tt.decidedBy || !strings.Contains(got.GetExplanation(), tt.inExp) {
				t.Fatalf("got %q %q %q\nwant %q %q ...%q...", got.GetVerdict(), got.GetDecidedBy(), got.GetExplanation(), tt.verdict, tt.decidedBy, tt.inExp)
			}
			if got.GetRule().GetRuleId() != tt.ruleID {
				t.Errorf("rule = %v, want id %q", got.GetRule(), tt.ruleID)
			}
		})
	}
}

// fakeEngine answers Endpoint; the rest of Engine is unused here.
type fakeEngine struct {
	Engine
	eps map[string]engine.EndpointInfo
}

func (f fakeEngine) Endpoint(id string) (engine.EndpointInfo, bool) {
	ep, ok := f.eps[id]
	return ep, ok
}

func (f fakeEngine) Endpoints() []engine.EndpointInfo {
	var out []engine.EndpointInfo
	for _, ep := range f.eps {
		out = append(out, ep)
	}
	return out
}

// fakeKernel is an engine.KernelInspector that records the trace run and
// answers from fixed tables.
type fakeKernel struct {
	iface    string
	frame    []byte
	dir      model.Direction
	rulesFor map[model.Direction][]model.RuleInfo
	counters map[uint64][2]uint64
	usage    []model.MapUsage
	usageErr error
}

var _ engine.KernelInspector = (*fakeKernel)(nil)

func (k *fakeKernel) AttachInfo() model.AttachInfo {
	return model.AttachInfo{Mode: "tc", Reason: "requested", Costs: []model.KernelCost{
		{Op: "tc_attach", Probe: time.Millisecond, ObservedMean: 2 * time.Millisecond, ObservedCount: 3},
		{Op: "program_load"},
	}}
}

func (k *fakeKernel) EndpointDetails(string) (model.EndpointDetails, bool) {
	return model.EndpointDetails{Ifindex: 7, AttachMode: "tcx", IngressProgram: "ingress:abc", Ready: true}, true
}

func (k *fakeKernel) Rules(_ string, d model.Direction) ([]model.RuleInfo, bool) {
	r, ok := k.rulesFor[d]
	return r, ok
}

// Trace denies by counter 2, as the linux kernel reports it.
func (k *fakeKernel) Trace(iface string, d model.Direction, frame []byte) (model.TraceResult, error) {
	k.iface, k.dir, k.frame = iface, d, frame
	res := model.TraceResult{Ifindex: 7, Return: 2, Stage: model.TraceDecided, RuleID: 2}
	for _, r := range k.rulesFor[d] {
		if r.CounterID == 2 {
			res.Rule, res.RuleFound = r, true
		}
	}
	return res, nil
}

func (k *fakeKernel) ReadCounter(id uint64) (model.RuleCounter, error) {
	c := k.counters[id]
	return model.RuleCounter{Packets: c[0], Bytes: c[1]}, nil
}

func (k *fakeKernel) MapUsage() ([]model.MapUsage, error) {
	if k.usage == nil && k.usageErr == nil {
		return []model.MapUsage{{Name: "dpd_conntrack", Entries: 3, Capacity: 512000, Conntrack: true}, {Name: "dpd_ipsets", Entries: 10, Capacity: 1 << 20}}, nil
	}
	return k.usage, k.usageErr
}

func (k *fakeKernel) ConntrackEntries() (int, error) { return 3, nil }

func TestTraceHandler(t *testing.T) {
	eng := fakeEngine{eps: map[string]engine.EndpointInfo{"k8s/ns/web/eth0": {
		ID: model.WorkloadID{Orchestrator: "k8s", Workload: "ns/web", Endpoint: "eth0"}, Iface: "caliweb", IPv4Nets: []string{"10.65.0.2/32"}},
		"k8s/ns/dual/eth0": {ID: model.WorkloadID{Orchestrator: "k8s", Workload: "ns/dual", Endpoint: "eth0"}, Iface: "calidual",
			IPv4Nets: []string{"10.65.0.3/32"}, IPv6Nets: []string{"fd00::3/128"}}}}
	k := &fakeKernel{rulesFor: map[model.Direction][]model.RuleInfo{model.Ingress: {
		{CounterID: 1, Tier: "default", Policy: "default/web", Kind: "policy", Index: 0, RuleID: "a", Action: model.ActionAllow},
		{CounterID: 2, Tier: "default", Policy: "default/web", Kind: "policy", Index: 1, RuleID: "b", Action: model.ActionDeny},
	}}, counters: map[uint64][2]uint64{2: {5, 300}}}
	s := newInspectService(eng, k, "test", "fake")
	ctx := context.Background()

	resp, err := s.Trace(ctx, &dpdv1.TraceRequest{Endpoint: "k8s/ns/web/eth0", Direction: "ingress", Protocol: "tcp",
		SrcIp: "10.65.0.1", SrcPort: 40000, DstPort: 8080})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVerdict() != "deny" || resp.GetRule().GetRuleId() != "b" || resp.GetRule().GetIndex() != 1 || resp.GetIfindex() != 7 {
		t.Fatalf("trace = %v", resp)
	}
	// The endpoint's own address filled the destination of an ingress packet.
	if k.iface != "caliweb" || k.dir != model.Ingress || !netip.AddrFrom4([4]byte(k.frame[30:34])).IsValid() ||
		netip.AddrFrom4([4]byte(k.frame[30:34])).String() != "10.65.0.2" || binary.BigEndian.Uint16(k.frame[36:]) != 8080 {
		t.Fatalf("ran on %s dir %v frame % x", k.iface, k.dir, k.frame)
	}

	// ICMP: a ping unless a type is given, and type 0 (echo reply) can be.
	zero := uint32(0)
	for _, tc := range []struct {
		typ  *uint32
		want byte
	}{{nil, 8}, {&zero, 0}} {
		if _, err := s.Trace(ctx, &dpdv1.TraceRequest{Endpoint: "k8s/ns/web/eth0", Direction: "egress", Protocol: "icmp",
			DstIp: "10.65.0.1", IcmpType: tc.typ}); err != nil {
			t.Fatal(err)
		}
		if k.frame[23] != protoICMP || k.frame[34] != tc.want || k.dir != model.Egress {
			t.Errorf("icmp type %v: frame % x", tc.typ, k.frame[14:38])
		}
	}

	// IPv6: both addresses given; "icmp" between them is ICMPv6, a ping by
	// default.
	if _, err := s.Trace(ctx, &dpdv1.TraceRequest{Endpoint: "k8s/ns/web/eth0", Direction: "ingress", Protocol: "icmp",
		SrcIp: "fd00::1", DstIp: "fd00::2"}); err != nil {
		t.Fatal(err)
	}
	if binary.BigEndian.Uint16(k.frame[12:]) != 0x86dd || k.frame[14+6] != protoICMPv6 || k.frame[54] != 128 ||
		netip.AddrFrom16([16]byte(k.frame[38:54])) != netip.MustParseAddr("fd00::2") {
		t.Fatalf("icmpv6 trace frame % x", k.frame)
	}

	// The endpoint's own IPv6 address fills its side of an IPv6 packet.
	if _, err := s.Trace(ctx, &dpdv1.TraceRequest{Endpoint: "k8s/ns/dual/eth0", Direction: "ingress", Protocol: "tcp",
		SrcIp: "fd00::1", DstPort: 80}); err != nil {
		t.Fatal(err)
	}
	if netip.AddrFrom16([16]byte(k.frame[38:54])) != netip.MustParseAddr("fd00::3") {
		t.Fatalf("ipv6 trace of a dual-stack endpoint: frame % x", k.frame)
	}

	for _, bad := range []struct {
		req  *dpdv1.TraceRequest
		code codes.Code
	}{
		{&dpdv1.TraceRequest{Endpoint: "k8s/ns/web/eth0", Direction: "ingress", SrcIp: "fd00::1", DstIp: "10.65.0.2"}, codes.InvalidArgument},
		{&dpdv1.TraceRequest{Endpoint: "k8s/ns/web/eth0", Direction: "ingress", SrcIp: "::ffff:10.0.0.1"}, codes.InvalidArgument},
		{&dpdv1.TraceRequest{Direction: "ingress"}, codes.InvalidArgument},
		{&dpdv1.TraceRequest{Endpoint: "nope", Direction: "ingress"}, codes.NotFound},
		{&dpdv1.TraceRequest{Endpoint: "k8s/ns/web/eth0", Direction: "sideways", SrcIp: "10.0.0.1"}, codes.InvalidArgument},
		{&dpdv1.TraceRequest{Endpoint: "k8s/ns/web/eth0", Direction: "ingress", SrcIp: "fe80::1"}, codes.InvalidArgument},
		{&dpdv1.TraceRequest{Endpoint: "k8s/ns/web/eth0", Direction: "ingress", SrcIp: "10.0.0.1", Protocol: "xtp"}, codes.InvalidArgument},
		{&dpdv1.TraceRequest{Endpoint: "k8s/ns/web/eth0", Direction: "ingress", SrcIp: "10.0.0.1", DstPort: 70000}, codes.InvalidArgument},
	} {
		if _, err := s.Trace(ctx, bad.req); status.Code(err) != bad.code {
			t.Errorf("Trace(%v) = %v, want %v", bad.req, err, bad.code)
		}
	}

	counters, err := s.GetCounters(ctx, &dpdv1.GetCountersRequest{Nonzero: true})
	if err != nil || len(counters.GetCounters()) != 1 || counters.GetCounters()[0].GetPackets() != 5 ||
		!slices.Contains(counters.GetCounters()[0].GetEndpoints(), "k8s/ns/web/eth0") {
		t.Fatalf("GetCounters = %v, %v", counters, err)
	}
	ep, err := s.GetEndpoint(ctx, &dpdv1.GetEndpointRequest{Id: "k8s/ns/web/eth0"})
	if err != nil || ep.GetAttachMode() != "tcx" || ep.GetIfindex() != 7 || len(ep.GetCounters()) != 2 {
		t.Fatalf("GetEndpoint = %v, %v", ep, err)
	}

	none := &inspectService{engine: eng}
	if _, err := none.Trace(ctx, &dpdv1.TraceRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("trace on memory: %v", err)
	}
	if _, err := none.GetCounters(ctx, &dpdv1.GetCountersRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("counters on memory: %v", err)
	}
}
