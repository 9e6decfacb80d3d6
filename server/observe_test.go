package server

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// flowKernel is a fakeKernel with flow events: a fixed history and a
// subscription the test feeds.
type flowKernel struct {
	*fakeKernel
	history []model.FlowEvent
	live    chan model.FlowEvent
	closed  bool
}

var _ engine.FlowObserver = (*flowKernel)(nil)

func (k *flowKernel) ObserveFlows(since time.Time, last int, follow bool, _ int) ([]model.FlowEvent, engine.FlowSubscription) {
	var out []model.FlowEvent
	for _, ev := range k.history {
		if !ev.Time.Before(since) {
			out = append(out, ev)
		}
	}
	if last > 0 && len(out) > last {
		out = out[len(out)-last:]
	}
	if !follow {
		return out, nil
	}
	return out, fakeSub{k}
}

func (k *flowKernel) FlowStats() model.FlowStats { return model.FlowStats{} }

type fakeSub struct{ k *flowKernel }

func (s fakeSub) Events() <-chan model.FlowEvent { return s.k.live }
func (s fakeSub) Lost() uint64                   { return 0 }
func (s fakeSub) Close()                         { s.k.closed = true }

// observeStream collects what Observe sends.
type observeStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan *dpdv1.ObserveResponse
}

func (s *observeStream) Context() context.Context { return s.ctx }
func (s *observeStream) Send(r *dpdv1.ObserveResponse) error {
	s.sent <- r
	return nil
}

var flowT0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func observeFixture() (*inspectService, *flowKernel) {
	web := engine.EndpointInfo{ID: model.WorkloadID{Orchestrator: "k8s", Workload: "ns/web", Endpoint: "eth0"},
		Iface: "caliweb", IPv4Nets: []string{"10.65.0.2/32"}}
	db := engine.EndpointInfo{ID: model.WorkloadID{Orchestrator: "k8s", Workload: "data/db", Endpoint: "eth0"},
		Iface: "calidb", IPv4Nets: []string{"10.65.0.3/32"}}
	eng := fakeEngine{eps: map[string]engine.EndpointInfo{web.ID.String(): web, db.ID.String(): db}}
	deny := model.RuleInfo{CounterID: 2, Tier: "default", Policy: "default/web", Kind: "policy", Index: 1, RuleID: "b", Action: model.ActionDeny}
	allow := model.RuleInfo{CounterID: 3, Tier: "default", Policy: "default/db", Kind: "policy", Index: 0, RuleID: "c", Action: model.ActionAllow}
	k := &flowKernel{fakeKernel: &fakeKernel{}, live: make(chan model.FlowEvent, 4), history: []model.FlowEvent{
		{Seq: 1, Time: flowT0, Iface: "caliweb", Ifindex: 7, Direction: model.Egress, Proto: 6,
			Src: netip.MustParseAddrPort("10.65.0.2:40000"), Dst: netip.MustParseAddrPort("10.65.0.9:80"),
			Stage: model.TraceDecided, RuleID: 2, Rule: deny, RuleFound: true, Suppressed: 4},
		{Seq: 2, Time: flowT0.Add(time.Second), Iface: "calidb", Ifindex: 8, Direction: model.Ingress, Proto: 6,
			Src: netip.MustParseAddrPort("10.65.0.2:40001"), Dst: netip.MustParseAddrPort("10.65.0.3:5432"),
			Stage: model.TraceDecided, Allowed: true, RuleID: 3, Rule: allow, RuleFound: true,
			Frontend: netip.MustParseAddrPort("10.96.0.10:5432")},
		{Seq: 3, Time: flowT0.Add(2 * time.Second), Iface: "calidb", Ifindex: 8, Direction: model.Egress, Proto: 17,
			Src: netip.MustParseAddrPort("10.65.0.3:999"), Dst: netip.MustParseAddrPort("10.0.0.1:53"),
			Stage: model.TraceNoPolicy},
	}}
	return newInspectService(eng, k, "test", "fake"), k
}

func observe(t *testing.T, s *inspectService, req *dpdv1.ObserveRequest) []*dpdv1.ObserveResponse {
	t.Helper()
	st := &observeStream{ctx: context.Background(), sent: make(chan *dpdv1.ObserveResponse, 100)}
	if err := s.Observe(req, st); err != nil {
		t.Fatalf("Observe(%v): %v", req, err)
	}
	close(st.sent)
	var out []*dpdv1.ObserveResponse
	for r := range st.sent {
		out = append(out, r)
	}
	return out
}

func seqs(rs []*dpdv1.ObserveResponse) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.GetFlow().GetSeq())
	}
	return out
}

func TestObserveHistoryAndFilters(t *testing.T) {
	s, _ := observeFixture()
	all := observe(t, s, &dpdv1.ObserveRequest{})
	if len(all) != 3 {
		t.Fatalf("%d flows, want 3", len(all))
	}
	f := all[0].GetFlow()
	if f.GetVerdict() != "deny" || f.GetDecidedBy() != "policy" || f.GetRule().GetPolicy() != "default/web" ||
		f.GetRule().GetIndex() != 1 || f.GetRule().GetRuleId() != "b" || f.GetRule().GetTier() != "default" ||
		f.GetSource().GetEndpoint() != "k8s/ns/web/eth0" || f.GetDestination().GetEndpoint() != "" ||
		f.GetDestination().GetPort() != 80 || f.GetProtocol() != "tcp" || f.GetDirection() != "egress" ||
		f.GetSuppressed() != 4 || !f.GetTime().AsTime().Equal(flowT0) {
		t.Fatalf("denied flow = %v", f)
	}
	f = all[1].GetFlow()
	if f.GetVerdict() != "allow" || f.GetDestination().GetEndpoint() != "k8s/data/db/eth0" ||
		f.GetSource().GetEndpoint() != "k8s/ns/web/eth0" || f.GetServiceIp() != "10.96.0.10" || f.GetServicePort() != 5432 {
		t.Fatalf("allowed service flow = %v", f)
	}
	if f := all[2].GetFlow(); f.GetVerdict() != "deny" || f.GetDecidedBy() != "no policy" || f.GetRule() != nil {
		t.Fatalf("no-policy flow = %v", f)
	}

	for _, tc := range []struct {
		req  *dpdv1.ObserveRequest
		want []uint64
	}{
		{&dpdv1.ObserveRequest{Verdict: "deny"}, []uint64{1, 3}},
		{&dpdv1.ObserveRequest{Verdict: "allow"}, []uint64{2}},
		{&dpdv1.ObserveRequest{Policy: "web"}, []uint64{1}},
		{&dpdv1.ObserveRequest{Policy: "default/db"}, []uint64{2}},
		{&dpdv1.ObserveRequest{Namespace: "data"}, []uint64{2, 3}},
		{&dpdv1.ObserveRequest{Namespace: "nope"}, nil},
		{&dpdv1.ObserveRequest{Endpoint: "k8s/ns/web/eth0"}, []uint64{1, 2}},
		{&dpdv1.ObserveRequest{Port: 53}, []uint64{3}},
		{&dpdv1.ObserveRequest{Protocol: "udp"}, []uint64{3}},
		{&dpdv1.ObserveRequest{Since: timestamppbOf(flowT0.Add(time.Second))}, []uint64{2, 3}},
		{&dpdv1.ObserveRequest{Last: 1}, []uint64{3}},
	} {
		if got := seqs(observe(t, s, tc.req)); !equalU64(got, tc.want) {
			t.Errorf("Observe(%v) = %v, want %v", tc.req, got, tc.want)
		}
	}

	for _, bad := range []struct {
		req  *dpdv1.ObserveRequest
		code codes.Code
	}{
		{&dpdv1.ObserveRequest{Verdict: "maybe"}, codes.InvalidArgument},
		{&dpdv1.ObserveRequest{Protocol: "xtp"}, codes.InvalidArgument},
		{&dpdv1.ObserveRequest{Port: 70000}, codes.InvalidArgument},
		{&dpdv1.ObserveRequest{Endpoint: "nope"}, codes.NotFound},
	} {
		st := &observeStream{ctx: context.Background(), sent: make(chan *dpdv1.ObserveResponse, 10)}
		if err := s.Observe(bad.req, st); status.Code(err) != bad.code {
			t.Errorf("Observe(%v) = %v, want %v", bad.req, err, bad.code)
		}
	}
}

func TestObserveFollowTellsLosses(t *testing.T) {
	s, k := observeFixture()
	ctx, cancel := context.WithCancel(context.Background())
	st := &observeStream{ctx: ctx, sent: make(chan *dpdv1.ObserveResponse, 100)}
	done := make(chan error, 1)
	go func() { done <- s.Observe(&dpdv1.ObserveRequest{Follow: true, Verdict: "allow"}, st) }()
	if r := <-st.sent; r.GetFlow().GetSeq() != 2 {
		t.Fatalf("backlog = %v", r)
	}
	// A filtered-out event that follows a loss still reports the loss.
	k.live <- model.FlowEvent{Seq: 9, Stage: model.TraceDecided, Lost: 5}
	if r := <-st.sent; r.GetFlow() != nil || r.GetLost() != 5 {
		t.Fatalf("loss report = %v", r)
	}
	k.live <- model.FlowEvent{Seq: 10, Stage: model.TraceDecided, Allowed: true, Proto: 6}
	if r := <-st.sent; r.GetFlow().GetSeq() != 10 || r.GetLost() != 0 {
		t.Fatalf("live flow = %v", r)
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled Observe returned %v", err)
	}
	if !k.closed {
		t.Fatal("subscription left open")
	}
}

func TestObserveNeedsFlowEvents(t *testing.T) {
	s := newInspectService(fakeEngine{}, &fakeKernel{}, "test", "fake")
	st := &observeStream{ctx: context.Background(), sent: make(chan *dpdv1.ObserveResponse, 1)}
	if err := s.Observe(&dpdv1.ObserveRequest{}, st); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Observe without flow events = %v", err)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func timestamppbOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
