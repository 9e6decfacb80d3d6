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
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

func TestRetryBackoff(t *testing.T) {
	now := time.Unix(1000, 0)
	var r retryState
	if !r.due(now) || r.failing() {
		t.Fatal("fresh state not due")
	}
	want := []time.Duration{10, 20, 40, 80, 100, 100}
	for i, w := range want {
		r.fail(now, 10, 100)
		if got := r.at.Sub(now); got != w {
			t.Fatalf("failure %d: backoff %v, want %v", i+1, got, w)
		}
		if r.due(now) || !r.due(now.Add(w)) {
			t.Fatalf("failure %d: due before/after backoff wrong", i+1)
		}
	}
	r.reset()
	if r.failing() {
		t.Fatal("reset state still failing")
	}
}

func m(s string) model.IPSetMember { return model.IPSetMember{Prefix: netip.MustParsePrefix(s)} }

func TestIPSetManagerDeltas(t *testing.T) {
	tests := []struct {
		name        string
		ops         func(mgr *ipsetManager)
		wantReplace bool
		added       []model.IPSetMember
		removed     []model.IPSetMember
	}{
		{"new set replaces", func(mgr *ipsetManager) {}, true, nil, nil},
		{"add and remove", func(mgr *ipsetManager) {
			mgr.sets["s"].inKernel, mgr.sets["s"].replace = true, false
			mgr.delta("s", []model.IPSetMember{m("10.0.0.3/32")}, []model.IPSetMember{m("10.0.0.1/32")})
		}, false, []model.IPSetMember{m("10.0.0.3/32")}, []model.IPSetMember{m("10.0.0.1/32")}},
		{"add then remove cancels", func(mgr *ipsetManager) {
			mgr.sets["s"].inKernel, mgr.sets["s"].replace = true, false
			mgr.delta("s", []model.IPSetMember{m("10.0.0.3/32")}, nil)
			mgr.delta("s", nil, []model.IPSetMember{m("10.0.0.3/32")})
		}, false, nil, nil},
		{"remove then re-add cancels", func(mgr *ipsetManager) {
			mgr.sets["s"].inKernel, mgr.sets["s"].replace = true, false
			mgr.delta("s", nil, []model.IPSetMember{m("10.0.0.1/32")})
			mgr.delta("s", []model.IPSetMember{m("10.0.0.1/32")}, nil)
		}, false, nil, nil},
		{"full update with other members replaces", func(mgr *ipsetManager) {
			mgr.sets["s"].inKernel, mgr.sets["s"].replace = true, false
			mgr.update("s", model.IPSetIP, []model.IPSetMember{m("10.0.0.9/32")})
		}, true, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mgr ipsetManager
			mgr.init()
			if !mgr.update("s", model.IPSetIP, []model.IPSetMember{m("10.0.0.1/32"), m("10.0.0.2/32")}) {
				t.Fatal("new set did not appear")
			}
			tc.ops(&mgr)
			s := mgr.sets["s"]
			if s.replace != tc.wantReplace {
				t.Fatalf("replace = %v", s.replace)
			}
			added, removed := s.pendingDelta()
			if !reflect.DeepEqual(added, tc.added) || !reflect.DeepEqual(removed, tc.removed) {
				t.Fatalf("delta +%v -%v, want +%v -%v", added, removed, tc.added, tc.removed)
			}
		})
	}
}

func TestIPSetManagerUnchangedAndSweep(t *testing.T) {
	var mgr ipsetManager
	mgr.init()
	mgr.update("a", model.IPSetIP, []model.IPSetMember{m("10.0.0.1/32")})
	mgr.update("b", model.IPSetIP, nil)
	mgr.dirty = map[string]struct{}{}
	mgr.markStale()
	if mgr.update("a", model.IPSetIP, []model.IPSetMember{m("10.0.0.1/32"), m("10.0.0.1/32")}) || len(mgr.dirty) != 0 {
		t.Fatal("unchanged re-send (with a duplicate) dirtied the set")
	}
	if got := mgr.sweep(); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("swept %v, want [b]", got)
	}
	if mgr.exists("b") || !mgr.exists("a") || mgr.count() != 1 {
		t.Fatal("sweep result wrong")
	}
}

func TestRulesStore(t *testing.T) {
	var s rulesStore[string]
	s.init()
	r1 := []model.Rule{{ID: "1", Action: model.ActionAllow}}
	steps := []struct {
		name    string
		in      []model.Rule
		changed bool
	}{
		{"new", r1, true},
		{"same content, new slice", []model.Rule{{ID: "1", Action: model.ActionAllow}}, false},
		{"changed", []model.Rule{{ID: "1", Action: model.ActionDeny}}, true},
	}
	for _, st := range steps {
		if got := s.update("p", st.in, nil); got != st.changed {
			t.Fatalf("%s: changed = %v", st.name, got)
		}
	}
	s.markStale()
	s.update("q", nil, nil)
	if got := s.sweep(); !reflect.DeepEqual(got, []string{"p"}) {
		t.Fatalf("swept %v", got)
	}
}

func TestRefIndex(t *testing.T) {
	var x refIndex[string]
	x.init()
	a, b := model.WorkloadID{Workload: "a"}, model.WorkloadID{Workload: "b"}
	x.set(a, []string{"p1", "p2"})
	x.set(b, []string{"p2"})
	if len(x.users("p1")) != 1 || len(x.users("p2")) != 2 {
		t.Fatal("users wrong")
	}
	x.set(a, []string{"p3"})
	if x.users("p1") != nil || len(x.users("p2")) != 1 || len(x.users("p3")) != 1 {
		t.Fatal("re-set did not move references")
	}
	x.set(b, nil)
	if x.users("p2") != nil || len(x.byEP) != 1 {
		t.Fatal("clearing left references")
	}
}

func TestObjectManager(t *testing.T) {
	e := New(fastOptions(memkernel.New()))
	now := time.Unix(1000, 0)
	var applied, removed []int
	fail := false
	apply := func(v *int) error {
		if fail {
			return errors.New("boom")
		}
		applied = append(applied, *v)
		return nil
	}
	remove := func(v *int) error { removed = append(removed, *v); return nil }
	mgr := newObjectManager("num", func(a, b *int) bool { return *a == *b }, func(k string) string { return k })
	one, two := 1, 2
	run := func() *pass {
		p := &pass{e: e}
		mgr.applyRemovals(e, now, p, remove)
		mgr.applyUpserts(e, now, p, apply)
		return p
	}
	mgr.set("a", &one)
	mgr.set("b", &two)
	run()
	if !reflect.DeepEqual(applied, []int{1, 2}) {
		t.Fatalf("applied %v", applied)
	}
	if mgr.set("a", &one) {
		t.Fatal("unchanged set reported a change")
	}
	fail = true
	three := 3
	mgr.set("a", &three)
	if p := run(); p.failed != 1 || mgr.failing() != 1 || mgr.readyWork(now) {
		t.Fatalf("failure not recorded: %+v", p)
	}
	fail = false
	now = now.Add(time.Second)
	run()
	if !reflect.DeepEqual(applied, []int{1, 2, 3}) || mgr.failing() != 0 {
		t.Fatalf("retry: applied %v", applied)
	}
	mgr.markStale()
	mgr.set("b", &two)
	if got := mgr.sweep(); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("swept %v", got)
	}
	run()
	if !reflect.DeepEqual(removed, []int{3}) || mgr.count() != 1 {
		t.Fatalf("removed %v", removed)
	}
}

func TestResolveTiers(t *testing.T) {
	e := New(fastOptions(memkernel.New()))
	pol := func(name string, in, out []*felix.Rule) {
		e.dispatch(tr(t, td(&felix.ActivePolicyUpdate{Id: &felix.PolicyID{Name: name},
			Policy: &felix.Policy{InboundRules: in, OutboundRules: out}})), time.Time{})
	}
	pol("in-only", []*felix.Rule{allowFrom("s:1")}, nil)
	pol("out-only", nil, []*felix.Rule{denyPort(53)})
	e.dispatch(tr(t, td(&felix.ActiveProfileUpdate{Id: &felix.ProfileID{Name: "prof"},
		Profile: &felix.Profile{InboundRules: []*felix.Rule{denyPort(1)}, OutboundRules: []*felix.Rule{denyPort(2)}}})), time.Time{})
	e.ipsets.update("s:1", model.IPSetIP, nil)
	ep := &felix.WorkloadEndpoint{Name: "cali1", ProfileIds: []string{"prof"}, Tiers: []*felix.TierInfo{
		{Name: "t1", IngressPolicies: []*felix.PolicyID{{Name: "in-only"}}, DefaultAction: "Pass"},
		{Name: "t2", EgressPolicies: []*felix.PolicyID{{Name: "out-only"}}},
	}}
	parsed, err := felixconv.WorkloadEndpointUpdate(&felix.WorkloadEndpointUpdate{Id: wepID("a"), Endpoint: ep})
	if err != nil {
		t.Fatal(err)
	}
	ent := &wepEntry{id: parsed.ID, spec: &parsed}
	got, sets, missing := e.resolve(ent)
	if missing != "" || !reflect.DeepEqual(sets, []string{"s:1"}) {
		t.Fatalf("missing %q sets %v", missing, sets)
	}
	if len(got.Ingress.Tiers) != 1 || got.Ingress.Tiers[0].Name != "t1" || got.Ingress.Tiers[0].DefaultAction != model.ActionPass ||
		got.Ingress.Tiers[0].Policies[0].Name != "t1/in-only" || got.Ingress.Tiers[0].Policies[0].Kind != "policy" {
		t.Fatalf("ingress tiers %+v", got.Ingress.Tiers)
	}
	if len(got.Egress.Tiers) != 1 || got.Egress.Tiers[0].Name != "t2" || got.Egress.Tiers[0].DefaultAction != model.ActionDeny ||
		got.Egress.Tiers[0].Policies[0].Rules[0].Action != model.ActionDeny {
		t.Fatalf("egress tiers %+v", got.Egress.Tiers)
	}
	if len(got.Ingress.Profiles) != 1 || got.Ingress.Profiles[0].Rules[0].DstPorts[0].First != 1 ||
		got.Egress.Profiles[0].Rules[0].DstPorts[0].First != 2 || got.Egress.Profiles[0].Kind != "profile" {
		t.Fatalf("profiles %+v / %+v", got.Ingress.Profiles, got.Egress.Profiles)
	}

	// Removing things names each missing reference.
	e.policies.remove(model.PolicyKey{Name: "out-only"})
	e.profiles.remove("prof")
	e.ipsets.remove("s:1")
	_, _, missing = e.resolve(ent)
	for _, want := range []string{"policy out-only", "profile prof", "ip set s:1"} {
		if !strings.Contains(missing, want) {
			t.Errorf("missing %q does not name %q", missing, want)
		}
	}
	if r := missingReason([]string{"1", "2", "3", "4", "5", "6", "7"}); !strings.HasSuffix(r, "and 2 more") {
		t.Errorf("long reason %q", r)
	}
}

func TestParseSeconds(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", defaultReportingInterval},
		{"10", 10 * time.Second},
		{"0.5", 500 * time.Millisecond},
		{"0", defaultReportingInterval},
		{"-3", defaultReportingInterval},
		{"soon", defaultReportingInterval},
	}
	for _, tc := range tests {
		if got := parseSeconds(tc.in, defaultReportingInterval); got != tc.want {
			t.Errorf("parseSeconds(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	var c configManager
	c.init()
	if !c.update(map[string]string{"InterfacePrefix": "cali, tap"}) || c.update(map[string]string{"InterfacePrefix": "cali, tap"}) {
		t.Fatal("config change detection wrong")
	}
	if !reflect.DeepEqual(c.interfacePrefix, []string{"cali", "tap"}) {
		t.Fatalf("prefixes %v", c.interfacePrefix)
	}
}
