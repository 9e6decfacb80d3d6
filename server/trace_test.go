package server

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/linux"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
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
}

func TestExplainTrace(t *testing.T) {
	rules := []polprog.RuleInfo{
		{CounterID: 11, Tier: "default", Policy: "default/web", Kind: "policy", Index: 0, RuleID: "r0", Action: model.ActionAllow},
		{CounterID: 12, Tier: "default", Policy: "default/web", Kind: "policy", Index: 1, RuleID: "r1", Action: model.ActionDeny},
		{CounterID: 13, Tier: "default", Index: -1, Action: model.ActionDeny, Synthetic: polprog.SyntheticTierDefault},
		{CounterID: 14, Index: -1, Action: model.ActionDeny, Synthetic: polprog.SyntheticNoMatch},
	}
	st := func(flags uint32, verdict uint32, rule uint64) tcbpf.TraceResult {
		return tcbpf.TraceResult{Reached: true, State: tcbpf.State{Ifindex: 5, Flags: flags, Verdict: verdict, RuleId: rule}}
	}
	tests := []struct {
		name                      string
		res                       tcbpf.TraceResult
		verdict, decidedBy, inExp string
		ruleID                    string
	}{
		{"not ready", tcbpf.TraceResult{Ret: abi.TCActShot}, "deny", "not ready", "not ready", ""},
		{"no backend", tcbpf.TraceResult{State: tcbpf.State{Flags: abi.StNoBackend}}, "deny", "service: no backend", "without a ready backend", ""},
		{"no policy", st(abi.StNoPolicy, 0, 0), "deny", "no policy", "no policy program", ""},
		{"allowed by rule 0", st(abi.StEpilogue, abi.VerdictAllow, 11), "allow", "policy", `rule 0 (id r0, allow) of policy "default/web" in tier "default"`, "r0"},
		{"denied by rule 1", st(abi.StEpilogue, abi.VerdictDeny, 12), "deny", "policy", `rule 1 (id r1, deny)`, "r1"},
		{"tier default", st(abi.StEpilogue, abi.VerdictDeny, 13), "deny", "tier-default", `tier "default" matched`, ""},
		{"no match", st(abi.StEpilogue, abi.VerdictDeny, 14), "deny", "no-match", "no policy or profile matched", ""},
		{"established flow", st(abi.StEpilogue|abi.StCTFwd, abi.VerdictDeny, 12), "allow", "conntrack: established", "as a new flow: deny: rule 1", "r1"},
		{"reply", st(abi.StEpilogue|abi.StCTRev, abi.VerdictDeny, 14), "allow", "conntrack: reply", "reply flow", ""},
		{"related icmp", st(abi.StNoPolicy|abi.StCTRelated, 0, 0), "allow", "conntrack: related", "related", ""},
		{"unknown rule", st(abi.StEpilogue, abi.VerdictDeny, 99), "deny", "policy", "not in the installed program", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := explainTrace(tt.res, rules, model.Ingress)
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

// fakeKernel records the trace run and answers from fixed tables.
type fakeKernel struct {
	kernelView
	ifindex  int
	frame    []byte
	dir      model.Direction
	rulesFor map[model.Direction][]polprog.RuleInfo
	counters map[uint64][2]uint64
}

func (k *fakeKernel) endpoint(string) (linux.EndpointDetails, bool) {
	return linux.EndpointDetails{Ifindex: 7, AttachMode: "tcx", IngressProgram: "ingress:abc", Ready: true}, true
}

func (k *fakeKernel) rules(_ string, d model.Direction) ([]polprog.RuleInfo, bool) {
	r, ok := k.rulesFor[d]
	return r, ok
}

func (k *fakeKernel) trace(ifindex int, d model.Direction, frame []byte) (tcbpf.TraceResult, error) {
	k.ifindex, k.dir, k.frame = ifindex, d, frame
	return tcbpf.TraceResult{Ret: abi.TCActShot, Reached: true,
		State: tcbpf.State{Ifindex: 7, Flags: abi.StEpilogue, Verdict: abi.VerdictDeny, RuleId: 2}}, nil
}

func (k *fakeKernel) readCounter(id uint64) (uint64, uint64, error) {
	c := k.counters[id]
	return c[0], c[1], nil
}

func TestTraceHandler(t *testing.T) {
	eng := fakeEngine{eps: map[string]engine.EndpointInfo{"k8s/ns/web/eth0": {
		ID: model.WorkloadID{Orchestrator: "k8s", Workload: "ns/web", Endpoint: "eth0"}, Iface: "caliweb", IPv4Nets: []string{"10.65.0.2/32"}}}}
	k := &fakeKernel{rulesFor: map[model.Direction][]polprog.RuleInfo{model.Ingress: {
		{CounterID: 1, Tier: "default", Policy: "default/web", Kind: "policy", Index: 0, RuleID: "a", Action: model.ActionAllow},
		{CounterID: 2, Tier: "default", Policy: "default/web", Kind: "policy", Index: 1, RuleID: "b", Action: model.ActionDeny},
	}}, counters: map[uint64][2]uint64{2: {5, 300}}}
	s := &inspectService{engine: eng, kernel: k}
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
	if k.ifindex != 7 || k.dir != model.Ingress || !netip.AddrFrom4([4]byte(k.frame[30:34])).IsValid() ||
		netip.AddrFrom4([4]byte(k.frame[30:34])).String() != "10.65.0.2" || binary.BigEndian.Uint16(k.frame[36:]) != 8080 {
		t.Fatalf("ran ifindex %d dir %v frame % x", k.ifindex, k.dir, k.frame)
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

	for _, bad := range []struct {
		req  *dpdv1.TraceRequest
		code codes.Code
	}{
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
		counters.GetCounters()[0].GetEndpoints()[0] != "k8s/ns/web/eth0" {
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

func (k *fakeKernel) mapUsage() ([]mapUsage, error) {
	return []mapUsage{{name: "dpd_ct", entries: 3, capacity: 512000}, {name: "dpd_ipsets", entries: 10, capacity: 1 << 20}}, nil
}
