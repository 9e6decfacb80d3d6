package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// FuzzInspectRequests: whatever a client puts in the Inspect requests that
// carry input (Trace, ListIPSets, GetEndpoint, GetCounters), the answer is
// a result or a clear client error, never a panic or an internal error,
// and a trace runs only on a well-formed frame.
func FuzzInspectRequests(f *testing.F) {
	eng := fakeEngine{eps: map[string]engine.EndpointInfo{"k8s/ns/web/eth0": {
		ID: model.WorkloadID{Orchestrator: "k8s", Workload: "ns/web", Endpoint: "eth0"}, Iface: "caliweb", IPv4Nets: []string{"10.65.0.2/32"}}}}
	k := &fakeKernel{rulesFor: map[model.Direction][]model.RuleInfo{model.Ingress: {{CounterID: 2, Policy: "p", Kind: "policy"}}}}
	s := newInspectService(eng, k, "test", "fuzz")
	f.Add("k8s/ns/web/eth0", "ingress", "tcp", "10.65.0.1", "", uint32(40000), uint32(8080), uint32(8), "", "")
	f.Add("k8s/ns/web/eth0", "egress", "icmp", "", "10.65.0.1", uint32(0), uint32(0), uint32(300), "big", "x")
	f.Add("nope", "sideways", "xtp", "fe80::1", "1.2.3.4.5", uint32(70000), uint32(1), uint32(0), "", "tok")
	ok := map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true}
	f.Fuzz(func(t *testing.T, ep, dir, proto, src, dst string, sport, dport, icmp uint32, setID, token string) {
		k.frame = nil
		_, err := s.Trace(context.Background(), &dpdv1.TraceRequest{Endpoint: ep, Direction: dir, Protocol: proto,
			SrcIp: src, DstIp: dst, SrcPort: sport, DstPort: dport, IcmpType: &icmp, IcmpCode: dport >> 16})
		if !ok[status.Code(err)] {
			t.Fatalf("Trace: %v", err)
		}
		if err == nil && (len(k.frame) < 34 || k.frame[14] != 0x45) {
			t.Fatalf("trace ran on a malformed frame % x", k.frame)
		}
		if _, err := s.ListIPSets(context.Background(), &dpdv1.ListIPSetsRequest{Id: setID, PageToken: token, MaxMembers: sport}); !ok[status.Code(err)] {
			t.Fatalf("ListIPSets: %v", err)
		}
		if _, err := s.GetEndpoint(context.Background(), &dpdv1.GetEndpointRequest{Id: ep}); !ok[status.Code(err)] {
			t.Fatalf("GetEndpoint: %v", err)
		}
		if _, err := s.GetCounters(context.Background(), &dpdv1.GetCountersRequest{Endpoint: ep, Nonzero: dport&1 == 1}); !ok[status.Code(err)] {
			t.Fatalf("GetCounters: %v", err)
		}
	})
}

// IPSets answers one set, "big", and knows no page token but "t1".
func (f fakeEngine) IPSets(_ context.Context, q engine.IPSetQuery) ([]engine.IPSetInfo, error) {
	if q.PageToken != "" && q.PageToken != "t1" {
		return nil, engine.ErrBadPageToken
	}
	if q.ID != "" && q.ID != "big" {
		return nil, nil
	}
	return []engine.IPSetInfo{{ID: "big", Type: "ip", MemberCount: 1, Members: []string{"10.0.0.1"}[:min(q.MaxMembers, 1)]}}, nil
}
