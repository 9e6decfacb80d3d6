package memkernel_test

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

var _ engine.Kernel = (*memkernel.Kernel)(nil)

func mem(s string) model.IPSetMember { return model.IPSetMember{Prefix: netip.MustParsePrefix(s)} }

func endpoint(name string, sets ...string) *model.Endpoint {
	ep := &model.Endpoint{ID: model.WorkloadID{Orchestrator: "k8s", Workload: name, Endpoint: "eth0"}, Iface: "cali" + name}
	if len(sets) > 0 {
		ep.Ingress.Tiers = []model.Tier{{Name: "default", Policies: []model.PolicyRules{{
			Name: "default/p", Rules: []model.Rule{{Action: model.ActionAllow, SrcIPSets: sets}}}}}}
	}
	return ep
}

func TestRecordsState(t *testing.T) {
	k := memkernel.New()
	if err := k.Configure(map[string]string{"InterfacePrefix": "cali"}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"replace", func() error {
			return k.ReplaceIPSet("s", model.IPSetIP, []model.IPSetMember{mem("10.0.0.2/32"), mem("10.0.0.1/32")})
		}},
		{"update", func() error {
			return k.UpdateIPSet("s", []model.IPSetMember{mem("10.0.0.3/32")}, []model.IPSetMember{mem("10.0.0.1/32")})
		}},
		{"endpoint", func() error { return k.ApplyEndpoint(endpoint("a", "s")) }},
		{"route", func() error { return k.ApplyRoute(&model.Route{Dst: netip.MustParsePrefix("10.65.1.0/26")}) }},
		{"service", func() error {
			return k.ApplyService(&model.Service{Key: model.ServiceKey{Namespace: "ns", Name: "web"}})
		}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}
	set, ok := k.IPSet("s")
	if !ok || !reflect.DeepEqual(set.Members, []model.IPSetMember{mem("10.0.0.2/32"), mem("10.0.0.3/32")}) {
		t.Fatalf("set %v", set)
	}
	if len(k.Endpoints()) != 1 || len(k.Routes()) != 1 || len(k.Services()) != 1 || k.Config()["InterfacePrefix"] != "cali" {
		t.Fatalf("state %v", k)
	}
	want := map[string]int{"Configure": 1, "ReplaceIPSet": 1, "UpdateIPSet": 1, "ApplyEndpoint": 1, "ApplyRoute": 1, "ApplyService": 1}
	if got := k.Calls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v", got)
	}
	if v := k.Violations(); len(v) != 0 {
		t.Fatalf("violations %v", v)
	}

	// Removing a set an endpoint still references is a violation.
	if err := k.RemoveIPSet("s"); err != nil {
		t.Fatal(err)
	}
	if v := k.Violations(); len(v) != 1 {
		t.Fatalf("violations %v", v)
	}
	_ = k.RemoveEndpoint(endpoint("a"))
	_ = k.RemoveRoute(&model.Route{Dst: netip.MustParsePrefix("10.65.1.0/26")})
	_ = k.RemoveService(&model.Service{Key: model.ServiceKey{Namespace: "ns", Name: "web"}})
	if len(k.Endpoints())+len(k.Routes())+len(k.Services())+len(k.IPSets()) != 0 {
		t.Fatalf("state after removal %v", k)
	}
	k.ResetCalls()
	if len(k.Calls()) != 0 || len(k.CallLog()) != 0 {
		t.Fatal("ResetCalls kept counters")
	}
}

func TestViolations(t *testing.T) {
	tests := []struct {
		name string
		do   func(k *memkernel.Kernel)
	}{
		{"endpoint before its set", func(k *memkernel.Kernel) { _ = k.ApplyEndpoint(endpoint("a", "missing")) }},
		{"delta to unknown set", func(k *memkernel.Kernel) { _ = k.UpdateIPSet("missing", nil, nil) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := memkernel.New()
			tc.do(k)
			if len(k.Violations()) != 1 {
				t.Fatalf("violations %v", k.Violations())
			}
		})
	}
}

func TestFailureInjection(t *testing.T) {
	k := memkernel.New()
	e1, e2 := errors.New("one"), errors.New("two")
	k.FailNext(memkernel.MethodApplyRoute, e1)
	k.Fail(memkernel.MethodApplyRoute, e2)
	r := &model.Route{Dst: netip.MustParsePrefix("10.0.0.0/24")}
	for i, want := range []error{e1, e2, e2} {
		if err := k.ApplyRoute(r); !errors.Is(err, want) {
			t.Fatalf("call %d: %v, want %v", i, err, want)
		}
	}
	if len(k.Routes()) != 0 {
		t.Fatal("failed call changed state")
	}
	k.Fail(memkernel.MethodApplyRoute, nil)
	if err := k.ApplyRoute(r); err != nil {
		t.Fatal(err)
	}
	k.FailNext(memkernel.MethodEndApply, e1)
	k.ClearFailures()
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	log := k.CallLog()
	if len(log) != 5 || !log[0].Failed || log[3].Failed || log[0].Arg != "10.0.0.0/24" {
		t.Fatalf("call log %v", log)
	}
}

func TestLinks(t *testing.T) {
	k := memkernel.New()
	if k.Link("anything") != model.LinkUp {
		t.Fatal("default link not up")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []model.LinkUpdate
	done := make(chan struct{})
	go func() {
		_ = k.WatchLinks(ctx, func(u model.LinkUpdate) {
			mu.Lock()
			got = append(got, u)
			mu.Unlock()
			k.Link(u.Name) // a reporter may call back in
		})
		close(done)
	}()
	testutil.WaitFor(t, waitTimeout, "watcher", func() bool { return k.Watchers() == 1 })
	k.SetLink("cali1", model.LinkDown)
	k.SetLink("cali1", model.LinkAbsent)
	if k.Link("cali1") != model.LinkAbsent {
		t.Fatal("SetLink not recorded")
	}
	k.SetDefaultLink(model.LinkDown)
	if k.Link("other") != model.LinkDown {
		t.Fatal("SetDefaultLink not applied")
	}
	cancel()
	<-done
	if k.Watchers() != 0 {
		t.Fatal("watcher not removed")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []model.LinkUpdate{{Name: "cali1", State: model.LinkDown}, {Name: "cali1", State: model.LinkAbsent}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reports %v", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	k := memkernel.New()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				_ = k.ReplaceIPSet("s", model.IPSetIP, []model.IPSetMember{mem("10.0.0.1/32")})
				k.SetLink("x", model.LinkUp)
				_ = k.Calls()
				_ = k.IPSets()
			}
		}()
	}
	wg.Wait()
	if k.Calls()[memkernel.MethodReplaceIPSet] != 400 {
		t.Fatalf("calls %v", k.Calls())
	}
}

const waitTimeout = 5 * time.Second
