package engine

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// snapshot is a small but complete controller state.
func snapshot() []*felix.ToDataplane {
	return []*felix.ToDataplane{
		config("InterfacePrefix", "cali", "ReportingIntervalSecs", "30"),
		ipset("s:web", "10.0.0.1", "10.0.0.2"),
		policy("allow-web", allowFrom("s:web")),
		profile("kns.default", allowFrom()),
		wep("a", "10.65.0.1", []string{"allow-web"}, "kns.default"),
		wep("b", "10.65.0.2", nil, "kns.default"),
		route("10.65.1.0/26"),
		service("default", "web", "10.96.0.10"),
		backends("default", "web", "10.65.0.1"),
		hostMeta("node2", "192.168.0.2"),
		vtep("node2", "66:00:00:00:00:02", "10.65.1.0", "192.168.0.2"),
	}
}

func TestNothingAppliedBeforeInSync(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.send(snapshot()...)
	if c := h.k.Calls(); len(c) != 0 {
		t.Fatalf("kernel called before InSync: %v", c)
	}
	if st := h.e.Status(); st.ControllerInSync || st.Endpoints != 2 {
		t.Fatalf("status before InSync = %+v", st)
	}
	h.send(inSync())
	if n := len(h.k.Endpoints()); n != 2 {
		t.Fatalf("endpoints after InSync = %d, want 2", n)
	}
	if _, ok := h.k.IPSet("s:web"); !ok {
		t.Fatal("ip set not programmed")
	}
	if len(h.k.Routes()) != 1 || len(h.k.Services()) != 1 {
		t.Fatalf("routes %v services %v", h.k.Routes(), h.k.Services())
	}
	if v := h.k.VTEPs(); len(v) != 1 || v[0].ParentDeviceIP != netip.MustParseAddr("192.168.0.2") {
		t.Fatalf("vteps %v", v)
	}
	if hm, ok := h.k.HostMetadata("node2"); !ok || hm.IPv4Addr != netip.MustParseAddr("192.168.0.2") {
		t.Fatalf("host metadata %v %v", hm, ok)
	}
	if got := h.k.Config()["InterfacePrefix"]; got != "cali" {
		t.Fatalf("kernel config InterfacePrefix = %q", got)
	}
	h.noViolations()
}

func TestApplyDependencyOrder(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.send(append(snapshot(), inSync())...)
	var got []string
	for _, c := range h.k.CallLog() {
		got = append(got, c.Method)
	}
	want := []string{
		memkernel.MethodConfigure,
		memkernel.MethodReplaceIPSet,
		memkernel.MethodApplyEndpoint, memkernel.MethodApplyEndpoint,
		memkernel.MethodApplyHostMetadata,
		memkernel.MethodApplyVTEP,
		memkernel.MethodApplyRoute,
		memkernel.MethodApplyService,
		memkernel.MethodEndApply,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("apply order\n got %v\nwant %v", got, want)
	}

	// A new session with an empty snapshot removes everything in one
	// pass, in the reverse order.
	h.k.ResetCalls()
	h.session()
	h.send(config("InterfacePrefix", "cali", "ReportingIntervalSecs", "30"), inSync())
	got = nil
	for _, c := range h.k.CallLog() {
		got = append(got, c.Method)
	}
	want = []string{
		memkernel.MethodRemoveService,
		memkernel.MethodRemoveRoute,
		memkernel.MethodRemoveVTEP,
		memkernel.MethodRemoveHostMetadata,
		memkernel.MethodRemoveEndpoint, memkernel.MethodRemoveEndpoint,
		memkernel.MethodRemoveIPSet,
		memkernel.MethodEndApply,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("removal order\n got %v\nwant %v", got, want)
	}
	h.noViolations()
}

func TestPolicyChangeDirtiesExactlyItsUsers(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.send(
		ipset("s:1", "10.0.0.1"),
		policy("p1", allowFrom("s:1")),
		policy("p2", denyPort(22)),
		profile("prof", allowFrom()),
		wep("a", "10.65.0.1", []string{"p1"}),
		wep("b", "10.65.0.2", []string{"p1", "p2"}),
		wep("c", "10.65.0.3", []string{"p2"}),
		wep("d", "10.65.0.4", nil, "prof"),
		inSync(),
	)
	applies := func() map[string]int {
		out := map[string]int{}
		for _, c := range h.k.CallLog() {
			if c.Method == memkernel.MethodApplyEndpoint {
				out[strings.Split(c.Arg, "/")[1]]++
			}
		}
		return out
	}
	tests := []struct {
		name string
		msgs []*felix.ToDataplane
		want map[string]int
	}{
		{"change p1", []*felix.ToDataplane{policy("p1", allowFrom("s:1"), denyPort(80))}, map[string]int{"a": 1, "b": 1}},
		{"change p2", []*felix.ToDataplane{policy("p2", denyPort(23))}, map[string]int{"b": 1, "c": 1}},
		{"change profile", []*felix.ToDataplane{profile("prof", denyPort(1))}, map[string]int{"d": 1}},
		{"p1 re-sent unchanged", []*felix.ToDataplane{policy("p1", allowFrom("s:1"), denyPort(80))}, map[string]int{}},
		{"unused policy", []*felix.ToDataplane{policy("p3", denyPort(9))}, map[string]int{}},
		{"set membership only", []*felix.ToDataplane{ipsetDelta("s:1", []string{"10.0.0.9"}, nil)}, map[string]int{}},
	}
	for _, tc := range tests {
		h.k.ResetCalls()
		h.send(tc.msgs...)
		if got := applies(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: ApplyEndpoint calls %v, want %v", tc.name, got, tc.want)
		}
	}
	h.noViolations()
}

func TestMarkAndSweep(t *testing.T) {
	h := newHarness(t)
	first := h.session()
	h.send(append(snapshot(), inSync())...)
	first.waitFor(t, "first DataplaneInSync", func(m []Status) bool { return count(m, isInSync) == 1 })

	// Same snapshot again: not one kernel call, not even Link.
	h.k.ResetCalls()
	second := h.session()
	if !first.isClosed() {
		testutil.WaitFor(t, waitTimeout, "old session's Out closed", first.isClosed)
	}
	h.send(append(snapshot(), inSync())...)
	second.waitFor(t, "second DataplaneInSync", func(m []Status) bool { return count(m, isInSync) == 1 })
	if c := h.k.Calls(); len(c) != 0 {
		t.Fatalf("unchanged resync made kernel calls: %v", c)
	}

	// A snapshot without endpoint b removes exactly b.
	h.k.ResetCalls()
	h.session()
	var snap []*felix.ToDataplane
	for _, m := range snapshot() {
		if m.GetWorkloadEndpointUpdate().GetId().GetWorkloadId() != "b" {
			snap = append(snap, m)
		}
	}
	h.send(append(snap, inSync())...)
	calls := h.k.Calls()
	if calls[memkernel.MethodRemoveEndpoint] != 1 || writes(calls) != 2 {
		t.Fatalf("calls = %v, want one RemoveEndpoint and EndApply", calls)
	}
	if log := h.k.CallLog(); log[0].Arg != "k8s/b/eth0" {
		t.Fatalf("removed %q, want k8s/b/eth0", log[0].Arg)
	}
	if _, ok := h.k.Endpoint(model.WorkloadID{Orchestrator: "k8s", Workload: "a", Endpoint: "eth0"}); !ok {
		t.Fatal("endpoint a was removed")
	}
	h.noViolations()
}

func TestSweepOnlyAfterInSync(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.send(append(snapshot(), inSync())...)
	h.k.ResetCalls()
	s := h.session()
	h.send(config("InterfacePrefix", "cali", "ReportingIntervalSecs", "30"))
	if c := h.k.Calls(); len(c) != 0 {
		t.Fatalf("kernel touched during resync before InSync: %v", c)
	}
	// The session ends mid-snapshot: the dataplane keeps the last state.
	s.Close()
	h.flush()
	if n := len(h.k.Endpoints()); n != 2 {
		t.Fatalf("endpoints after aborted resync = %d, want 2", n)
	}
}

func TestFailureRetriesWithBackoffUntilUp(t *testing.T) {
	h := newHarness(t)
	s := h.session()
	boom := errors.New("tc attach: device busy")
	h.k.FailNext(memkernel.MethodApplyEndpoint, boom)
	h.k.FailNext(memkernel.MethodApplyEndpoint, boom)
	h.send(wep("a", "10.65.0.1", nil), inSync())
	msgs := s.waitFor(t, "endpoint up and DataplaneInSync", func(m []Status) bool {
		st := statuses(m, "a")
		return len(st) > 0 && st[len(st)-1] == statusUp && count(m, isInSync) == 1
	})
	if got := statuses(msgs, "a"); !reflect.DeepEqual(got, []string{statusError, statusUp}) {
		t.Fatalf("statuses = %v, want [error up]", got)
	}
	// DataplaneInSync only once the failure was repaired.
	var inSyncAt, upAt int
	for i, m := range msgs {
		if isInSync(m) {
			inSyncAt = i
		}
		if u, ok := m.(*WorkloadStatus); ok && u.Status == statusUp {
			upAt = i
		}
	}
	if inSyncAt < upAt {
		t.Fatalf("DataplaneInSync (msg %d) before the endpoint was up (msg %d)", inSyncAt, upAt)
	}
	if n := h.k.Calls()[memkernel.MethodApplyEndpoint]; n != 3 {
		t.Fatalf("ApplyEndpoint calls = %d, want 3", n)
	}
	if st, reason := h.endpointStatus("a"); st != statusUp || reason != "" {
		t.Fatalf("status %q reason %q", st, reason)
	}
}

func TestFailureStatusNamesTheError(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.k.Fail(memkernel.MethodApplyEndpoint, errors.New("no such device"))
	h.send(wep("a", "10.65.0.1", nil), inSync())
	testutil.WaitFor(t, waitTimeout, "error status", func() bool {
		st, reason := h.endpointStatus("a")
		return st == statusError && strings.Contains(reason, "no such device")
	})
	if h.e.Status().LastApplyError == "" {
		t.Fatal("LastApplyError empty after a failed apply")
	}
	h.k.Fail(memkernel.MethodApplyEndpoint, nil)
	testutil.WaitFor(t, waitTimeout, "recovery", func() bool {
		st, _ := h.endpointStatus("a")
		return st == statusUp
	})
}

func TestMissingReferences(t *testing.T) {
	tests := []struct {
		name    string
		initial []*felix.ToDataplane
		reason  string
		fix     []*felix.ToDataplane
	}{
		{"policy", []*felix.ToDataplane{wep("a", "10.65.0.1", []string{"p1"})},
			"policy p1", []*felix.ToDataplane{policy("p1", allowFrom())}},
		{"profile", []*felix.ToDataplane{wep("a", "10.65.0.1", nil, "prof")},
			"profile prof", []*felix.ToDataplane{profile("prof", allowFrom())}},
		{"ip set", []*felix.ToDataplane{policy("p1", allowFrom("s:x")), wep("a", "10.65.0.1", []string{"p1"})},
			"ip set s:x", []*felix.ToDataplane{ipset("s:x", "10.1.1.1")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			s := h.session()
			h.send(append(tc.initial, inSync())...)
			st, reason := h.endpointStatus("a")
			if st != statusError || !strings.Contains(reason, tc.reason) {
				t.Fatalf("status %q reason %q, want error naming %q", st, reason, tc.reason)
			}
			if n := h.k.Calls()[memkernel.MethodApplyEndpoint]; n != 0 {
				t.Fatalf("endpoint with a missing reference applied %d times", n)
			}
			h.send(tc.fix...)
			if st, reason := h.endpointStatus("a"); st != statusUp {
				t.Fatalf("after the fix: status %q reason %q", st, reason)
			}
			s.waitFor(t, "error then up", func(m []Status) bool {
				return reflect.DeepEqual(statuses(m, "a"), []string{statusError, statusUp})
			})
			h.noViolations()
		})
	}
}

func TestIPSetDeltasAndRemoval(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.send(ipset("s:1", "10.0.0.1", "10.0.0.2"), policy("p", allowFrom("s:1")),
		wep("a", "10.65.0.1", []string{"p"}), inSync())
	h.k.ResetCalls()
	h.send(ipsetDelta("s:1", []string{"10.0.0.3"}, []string{"10.0.0.1"}))
	if c := h.k.Calls(); c[memkernel.MethodUpdateIPSet] != 1 || c[memkernel.MethodReplaceIPSet] != 0 {
		t.Fatalf("calls after delta: %v", c)
	}
	set, _ := h.k.IPSet("s:1")
	want := []model.IPSetMember{
		{Prefix: netip.MustParsePrefix("10.0.0.2/32")},
		{Prefix: netip.MustParsePrefix("10.0.0.3/32")},
	}
	if !reflect.DeepEqual(set.Members, want) {
		t.Fatalf("members %v, want %v", set.Members, want)
	}
	// Removing the set while the endpoint still uses it: the endpoint goes
	// to error, and the kernel keeps the set it references.
	h.send(ipsetRemove("s:1"))
	if _, ok := h.k.IPSet("s:1"); !ok {
		t.Fatal("set removed while an applied endpoint references it")
	}
	if st, reason := h.endpointStatus("a"); st != statusError || !strings.Contains(reason, "s:1") {
		t.Fatalf("status %q reason %q", st, reason)
	}
	// Once the endpoint no longer references it, the set goes.
	h.send(policy("p", allowFrom()))
	if _, ok := h.k.IPSet("s:1"); ok {
		t.Fatal("unreferenced removed set still programmed")
	}
	h.noViolations()
}

func TestServicesMergeBackends(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.send(backends("ns", "svc", "10.65.0.5"), inSync())
	if n := len(h.k.Services()); n != 0 {
		t.Fatalf("service programmed without its ServiceUpdate: %d", n)
	}
	h.send(service("ns", "svc", "10.96.0.1"))
	svc, ok := h.k.Service(model.ServiceKey{Namespace: "ns", Name: "svc"})
	if !ok || len(svc.Backends) != 1 || svc.Backends[0].Addr != netip.MustParseAddr("10.65.0.5") {
		t.Fatalf("service %+v ok=%v", svc, ok)
	}
	h.send(td(&felix.ServiceBackendsRemove{Namespace: "ns", Name: "svc"}))
	svc, _ = h.k.Service(model.ServiceKey{Namespace: "ns", Name: "svc"})
	if len(svc.Backends) != 0 {
		t.Fatalf("backends after remove: %v", svc.Backends)
	}
	h.send(td(&felix.ServiceRemove{Namespace: "ns", Name: "svc"}), routeRemove("10.65.1.0/26"))
	if n := len(h.k.Services()); n != 0 {
		t.Fatalf("services after remove: %d", n)
	}
}

func TestResyncRepairsDrift(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.ResyncInterval = 20 * time.Millisecond })
	h.session()
	h.send(wep("a", "10.65.0.1", nil), route("10.65.1.0/26"), inSync())
	ep := h.k.Endpoints()[0]
	// Drift: something outside dpd removed the endpoint's programming.
	if err := h.k.RemoveEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, waitTimeout, "resync re-applies the endpoint", func() bool {
		return len(h.k.Endpoints()) == 1
	})
}
