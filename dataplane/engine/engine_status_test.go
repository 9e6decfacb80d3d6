package engine

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

func TestStatusSentOnlyOnChange(t *testing.T) {
	h := newHarness(t)
	s := h.session()
	h.send(policy("p", allowFrom()), wep("a", "10.65.0.1", []string{"p"}), inSync())
	s.waitFor(t, "up", func(m []Status) bool { return len(statuses(m, "a")) == 1 })

	steps := []struct {
		name string
		do   func()
		want []string
	}{
		{"unchanged re-send", func() { h.send(wep("a", "10.65.0.1", []string{"p"})) }, []string{"up"}},
		{"policy change, still up", func() { h.send(policy("p", denyPort(1))) }, []string{"up"}},
		{"link down", func() { h.k.SetLink("calia", model.LinkDown); h.flush() }, []string{"up", "down"}},
		{"link down again", func() { h.k.SetLink("calia", model.LinkDown); h.flush() }, []string{"up", "down"}},
		{"link up", func() { h.k.SetLink("calia", model.LinkUp); h.flush() }, []string{"up", "down", "up"}},
	}
	for _, st := range steps {
		st.do()
		// A heartbeat-free flush point: everything emitted so far is queued.
		got := s.waitFor(t, st.name, func(m []Status) bool { return len(statuses(m, "a")) >= len(st.want) })
		if !reflect.DeepEqual(statuses(got, "a"), st.want) {
			t.Fatalf("%s: statuses %v, want %v", st.name, statuses(got, "a"), st.want)
		}
	}
}

func TestLinkAbsentThenUpReapplies(t *testing.T) {
	h := newHarness(t)
	s := h.session()
	h.k.SetLink("calia", model.LinkAbsent)
	h.send(wep("a", "10.65.0.1", nil), inSync())
	if st, reason := h.endpointStatus("a"); st != statusDown || !strings.Contains(reason, "absent") {
		t.Fatalf("status %q reason %q, want down (absent)", st, reason)
	}
	if n := h.k.Calls()[memkernel.MethodApplyEndpoint]; n != 1 {
		t.Fatalf("ApplyEndpoint = %d, want 1 (recorded for when the link appears)", n)
	}
	h.k.SetLink("calia", model.LinkUp)
	s.waitFor(t, "up", func(m []Status) bool {
		return reflect.DeepEqual(statuses(m, "a"), []string{statusDown, statusUp})
	})
	if n := h.k.Calls()[memkernel.MethodApplyEndpoint]; n != 2 {
		t.Fatalf("ApplyEndpoint = %d, want 2 (re-applied when the link came up)", n)
	}
}

func TestDataplaneInSyncOncePerSession(t *testing.T) {
	h := newHarness(t)
	for i := 0; i < 2; i++ {
		s := h.session()
		h.send(wep("a", "10.65.0.1", nil), inSync())
		h.send(wep("b", "10.65.0.2", nil), inSync())
		h.send(wepRemove("b"))
		s.waitFor(t, "statuses", func(m []Status) bool {
			return count(m, func(m Status) bool { _, ok := m.(*WorkloadRemoved); return ok }) == 1
		})
		if n := count(s.snapshot(), isInSync); n != 1 {
			t.Fatalf("session %d: %d DataplaneInSync, want 1", i, n)
		}
	}
}

func TestHappyReportFullThenDeltas(t *testing.T) {
	h := newHarness(t)
	s := h.session()
	h.send(wep("a", "10.65.0.1", nil), wep("x", "10.65.0.9", []string{"missing"}), inSync())
	happy := func() []*HappyReport {
		var out []*HappyReport
		for _, m := range s.snapshot() {
			if r, ok := m.(*HappyReport); ok {
				out = append(out, r)
			}
		}
		return out
	}
	ids := func(l []model.WorkloadID) []string {
		var out []string
		for _, id := range l {
			out = append(out, id.Workload)
		}
		return out
	}
	s.waitFor(t, "full report", func(m []Status) bool { return count(m, isHappy) == 1 })
	r := happy()[0]
	if !r.Full || !reflect.DeepEqual(ids(r.Added), []string{"a"}) || r.Happy != 1 || r.Errored != 1 {
		t.Fatalf("first report %v", r)
	}
	h.send(wep("b", "10.65.0.2", nil))
	s.waitFor(t, "delta add", func(m []Status) bool { return count(m, isHappy) == 2 })
	if r := happy()[1]; r.Full || !reflect.DeepEqual(ids(r.Added), []string{"b"}) || len(r.Removed) != 0 || r.Happy != 2 {
		t.Fatalf("second report %v", r)
	}
	h.send(wepRemove("a"))
	s.waitFor(t, "delta remove", func(m []Status) bool { return count(m, isHappy) == 3 })
	if r := happy()[2]; r.Full || !reflect.DeepEqual(ids(r.Removed), []string{"a"}) || r.Happy != 1 {
		t.Fatalf("third report %v", r)
	}
	// A change that leaves the happy set alone sends no report.
	h.send(policy("other", allowFrom()))
	h.send(wep("c", "10.65.0.3", []string{"missing"}))
	if n := len(happy()); n != 3 {
		t.Fatalf("%d happy reports, want 3", n)
	}
	// A new session starts with the whole set again.
	s2 := h.session()
	h.send(wep("b", "10.65.0.2", nil), inSync())
	got := s2.waitFor(t, "full report", func(m []Status) bool { return count(m, isHappy) == 1 })
	for _, m := range got {
		if r, ok := m.(*HappyReport); ok && (!r.Full || !reflect.DeepEqual(ids(r.Added), []string{"b"})) {
			t.Fatalf("new session report %v", r)
		}
	}
}

func TestHeartbeats(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.HeartbeatFirst = 5 * time.Millisecond })
	s := h.session()
	got := s.waitFor(t, "first heartbeat", func(m []Status) bool { return count(m, isHeartbeat) >= 1 })
	hb, ok := got[0].(*Heartbeat)
	if !ok {
		t.Fatalf("first message %v, want a heartbeat", got[0])
	}
	if hb.Time.IsZero() || hb.Uptime < 0 {
		t.Fatalf("heartbeat %+v: want a time and a non-negative uptime", hb)
	}
	// The default interval is 30 s: a short configured one must take effect.
	h.send(config("ReportingIntervalSecs", "0.02"))
	got = s.waitFor(t, "periodic heartbeats", func(m []Status) bool { return count(m, isHeartbeat) >= 4 })
	var last time.Duration
	for _, m := range got {
		if p, ok := m.(*Heartbeat); ok {
			if p.Uptime < last {
				t.Fatalf("uptime went backwards: %v after %v", p.Uptime, last)
			}
			last = p.Uptime
		}
	}
}

func TestRejectMarksEndpointError(t *testing.T) {
	h := newHarness(t)
	s := h.session()
	h.send(profile("p", allowFrom()), wep("a", "10.65.0.1", nil, "p"), inSync())
	h.submitBadNets(t, s, "a", "10.65.0.1")
	h.flush()
	if st, reason := h.endpointStatus("a"); st != statusError || !strings.Contains(reason, "not-a-net") {
		t.Fatalf("status %q reason %q", st, reason)
	}
	// The endpoint stays programmed but fails closed: the rejected update
	// may have taken away what the older policy allowed.
	if len(h.k.Endpoints()) != 1 {
		t.Fatal("an invalid message removed the endpoint")
	}
	if ep, _ := h.k.Endpoint(wid("a")); ep == nil || !dropsAll(ep) {
		t.Fatalf("rejected endpoint still enforces %+v", ep)
	}
	if st := h.e.Status(); st.InvalidMessages != 1 || st.Errored != 1 {
		t.Fatalf("status %+v", st)
	}
	// A rejected update does not protect... a valid one repairs it.
	h.send(wep("a", "10.65.0.1", nil, "p"))
	if st, _ := h.endpointStatus("a"); st != statusUp {
		t.Fatalf("status after valid update %q", st)
	}
	if ep, _ := h.k.Endpoint(wid("a")); ep == nil || dropsAll(ep) {
		t.Fatalf("repaired endpoint enforces %+v", ep)
	}
	// Rejecting a message about an unknown endpoint creates it in error.
	bad2 := wep("z", "10.65.0.7", nil)
	bad2.GetWorkloadEndpointUpdate().Endpoint.Name = ""
	if err := submitFelix(h.ctx, s, bad2); err != nil {
		t.Fatal(err)
	}
	h.flush()
	if st, _ := h.endpointStatus("z"); st != statusError {
		t.Fatalf("unknown rejected endpoint status %q", st)
	}
	s.waitFor(t, "error status for z", func(m []Status) bool {
		return reflect.DeepEqual(statuses(m, "z"), []string{statusError})
	})
}

func TestInspectAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, func(o *Options) { o.Registry = reg })
	h.session()
	h.send(append(snapshot(), wep("x", "10.65.0.9", []string{"missing"}), inSync())...)
	st := h.e.Status()
	want := StatusInfo{Endpoints: 3, Up: 2, Errored: 1, Policies: 1, Profiles: 1, IPSets: 1, Routes: 1, Services: 1}
	got := StatusInfo{Endpoints: st.Endpoints, Up: st.Up, Errored: st.Errored, Policies: st.Policies,
		Profiles: st.Profiles, IPSets: st.IPSets, Routes: st.Routes, Services: st.Services}
	if got != want || !st.ControllerInSync || !st.Connected || st.MessagesReceived != 13 {
		t.Fatalf("status %+v", st)
	}
	testutil.WaitFor(t, waitTimeout, "DataplaneInSync in status", func() bool { return h.e.Status().DataplaneInSync })
	eps := h.e.Endpoints()
	if len(eps) != 3 || eps[0].ID.Workload != "a" || eps[0].Iface != "calia" || eps[0].Tiers[0] != "default" ||
		eps[0].IPv4Nets[0] != "10.65.0.1/32" || eps[0].LastProgrammed.IsZero() {
		t.Fatalf("endpoints %+v", eps)
	}
	if _, ok := h.e.Endpoint("k8s/b/eth0"); !ok {
		t.Fatal("Endpoint by full id")
	}
	if info, ok := h.e.Endpoint("x"); !ok || info.Status != statusError || !strings.Contains(info.Reason, "policy missing") {
		t.Fatalf("Endpoint by workload: %+v %v", info, ok)
	}
	tests := []struct {
		name, label string
		want        float64
	}{
		{"dpd_messages_received_total", "workload_endpoint_update", 3},
		{"dpd_messages_received_total", "in_sync", 1},
		{"dpd_happy_endpoints", "", 2},
		{"dpd_dirty_endpoints", "", 0},
		{"dpd_endpoint_programming_latency_seconds", "", 2},
		{"dpd_apply_duration_seconds", "", 1},
	}
	for _, tc := range tests {
		if got := metricValue(t, reg, tc.name, tc.label); got != tc.want {
			t.Errorf("%s{%s} = %v, want %v", tc.name, tc.label, got, tc.want)
		}
	}
	if got := metricValue(t, reg, "dpd_batch_size", ""); got < 1 {
		t.Errorf("dpd_batch_size count = %v", got)
	}
}

// metricValue reads a counter or gauge value, or a histogram's sample
// count, from reg; label filters on the first label's value.
func metricValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func wid(wl string) model.WorkloadID {
	return model.WorkloadID{Orchestrator: "k8s", Workload: wl, Endpoint: "eth0"}
}

// dropsAll: no tier and no profile in either direction, which drops.
func dropsAll(ep *model.Endpoint) bool {
	return len(ep.Ingress.Tiers)+len(ep.Ingress.Profiles)+len(ep.Egress.Tiers)+len(ep.Egress.Profiles) == 0
}

// endApplyGate is the memory kernel whose EndApply passes a gate.
type endApplyGate struct {
	*memkernel.Kernel
	gate callGate
}

func (k *endApplyGate) EndApply() error {
	k.gate.pass()
	return k.Kernel.EndApply()
}

// TestStatusBeforeEndApply: an endpoint's status goes out as soon as the
// pass has applied it, not after the rest of the pass (EndApply here),
// and Inspect shows the endpoint up by then.
func TestStatusBeforeEndApply(t *testing.T) {
	h, k := newWrappedHarness(t, func(m *memkernel.Kernel) *endApplyGate { return &endApplyGate{Kernel: m} })
	s := h.session()
	h.send(profile("kns.default", allowFrom()), inSync())
	entered, release := k.gate.arm()
	defer release()
	if err := h.sess.Submit(h.ctx, tr(t, wep("a", "10.65.0.1", nil, "kns.default"))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(waitTimeout):
		t.Fatal("the pass never reached EndApply")
	}
	s.waitFor(t, "up while EndApply is held", func(m []Status) bool {
		return reflect.DeepEqual(statuses(m, "a"), []string{statusUp})
	})
	if info, ok := h.e.Endpoint("k8s/a/eth0"); !ok || info.Status != statusUp {
		t.Fatalf("Inspect shows %+v (found %v) when the endpoint was reported up", info, ok)
	}
	release()
	h.flush()
}
