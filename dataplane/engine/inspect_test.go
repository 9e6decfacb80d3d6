package engine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// TestInspectNeverBehindStatus: a client that sees an endpoint's status
// and then asks Inspect must find Inspect at least as new. The statuses of
// a loop iteration are flushed only after that iteration published.
func TestInspectNeverBehindStatus(t *testing.T) {
	h := newHarness(t)
	sess := h.e.NewSession("test")
	submit := func(m *felix.ToDataplane) {
		t.Helper()
		if err := sess.Submit(h.ctx, tr(t, m)); err != nil {
			t.Fatal(err)
		}
	}
	const n = 60
	submit(profile("p", allowFrom()))
	for i := range n {
		wl := fmt.Sprintf("w%d", i)
		h.k.SetLink("cali"+wl, model.LinkUp)
		submit(wep(wl, fmt.Sprintf("10.0.0.%d", i+1), nil, "p"))
	}
	submit(inSync())
	checked := 0
	hang := time.After(waitTimeout) // hang guard, not a timing assertion
	for checked < n {
		select {
		case m := <-sess.Out():
			u, ok := m.(*WorkloadStatus)
			if !ok || u.Status != statusUp {
				continue
			}
			key := u.ID.String()
			info, ok := h.e.Endpoint(key)
			if !ok || info.Status != statusUp {
				t.Fatalf("status says %s up, Inspect says %+v (found %t)", key, info, ok)
			}
			checked++
		case <-hang:
			t.Fatalf("only %d of %d endpoints reported up", checked, n)
		}
	}
	// A second wave: a policy change re-reports after re-applying.
	submit(wepRemove("w0"))
	for {
		select {
		case m := <-sess.Out():
			if r, ok := m.(*WorkloadRemoved); ok && r.ID.Workload == "w0" {
				if _, ok := h.e.Endpoint("k8s/w0/eth0"); ok {
					t.Fatal("status remove sent while Inspect still lists the endpoint")
				}
				return
			}
		case <-hang:
			t.Fatal("no status remove for w0")
		}
	}
}

func TestInspectLists(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.k.SetLink("caliA", model.LinkUp)
	members := []string{"10.0.0.9", "10.0.0.1", "10.0.0.5", "10.0.0.3"}
	h.send(
		ipset("s1", members...),
		ipset("unused", "192.168.1.1"),
		policy("pol", allowFrom("s1"), denyPort(8080)),
		profile("prof", allowFrom()),
		wep("A", "10.1.0.1", []string{"pol"}, "prof"),
		route("10.9.0.0/24"),
		service("ns", "svc", "10.96.0.1"),
		backends("ns", "svc", "10.1.0.1"),
		inSync(),
	)
	ctx := context.Background()

	pols, err := h.e.Policies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []PolicyInfo{
		{Kind: "policy", Name: "pol", Tiers: []string{"default"}, InboundRules: 2, OutboundRules: 1, Endpoints: 1, IPSets: []string{"s1"}},
		{Kind: "profile", Name: "prof", InboundRules: 1, OutboundRules: 1, Endpoints: 1},
	}
	if !reflect.DeepEqual(pols, want) {
		t.Errorf("Policies = %+v\nwant       %+v", pols, want)
	}

	sets, err := h.e.IPSets(ctx, IPSetQuery{MaxMembers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 2 || sets[0].NextPage == "" || sets[1].NextPage != "" {
		t.Fatalf("IPSets = %+v: want a next page of s1 only", sets)
	}
	wantSets := []IPSetInfo{
		{ID: "s1", Type: "ip", MemberCount: 4, Members: []string{"10.0.0.1", "10.0.0.3"}, Endpoints: 1, NextPage: sets[0].NextPage},
		{ID: "unused", Type: "ip", MemberCount: 1, Members: []string{"192.168.1.1"}},
	}
	if !reflect.DeepEqual(sets, wantSets) {
		t.Errorf("IPSets = %+v\nwant     %+v", sets, wantSets)
	}
	one, err := h.e.IPSets(ctx, IPSetQuery{ID: "s1"})
	if err != nil || len(one) != 1 || one[0].MemberCount != 4 || one[0].Members != nil || one[0].NextPage != "" {
		t.Errorf("IPSets(s1, 0) = %+v, %v", one, err)
	}
	rest, err := h.e.IPSets(ctx, IPSetQuery{ID: "s1", MaxMembers: 2, PageToken: sets[0].NextPage})
	if err != nil || len(rest) != 1 || len(rest[0].Members) != 2 || rest[0].Members[0] == "10.0.0.3" || rest[0].NextPage != "" {
		t.Errorf("second page of s1 = %+v, %v", rest, err)
	}
	for _, q := range []IPSetQuery{{PageToken: sets[0].NextPage}, {ID: "s1", PageToken: "x"}, {ID: "s1", PageToken: "AAAA"}} {
		if _, err := h.e.IPSets(ctx, q); !errors.Is(err, ErrBadPageToken) {
			t.Errorf("IPSets(%+v) = %v, want ErrBadPageToken", q, err)
		}
	}

	svcs, err := h.e.Services(ctx)
	if err != nil || len(svcs) != 1 || svcs[0].Key != (model.ServiceKey{Namespace: "ns", Name: "svc"}) || len(svcs[0].Backends) != 1 {
		t.Errorf("Services = %+v, %v", svcs, err)
	}
	routes, err := h.e.Routes(ctx)
	if err != nil || len(routes) != 1 || routes[0].Dst.String() != "10.9.0.0/24" {
		t.Errorf("Routes = %+v, %v", routes, err)
	}
	if got := RouteTypeNames(routes[0].Types); !reflect.DeepEqual(got, []string{"remote-workload"}) {
		t.Errorf("route types = %v", got)
	}
}

func TestMemberString(t *testing.T) {
	if got := MemberString(model.IPSetMember{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Proto: 6, Port: 80}); got != "10.0.0.1,tcp:80" {
		t.Errorf("ip-and-port member = %q", got)
	}
	if got := MemberString(model.IPSetMember{Prefix: netip.MustParsePrefix("10.0.0.0/8")}); got != "10.0.0.0/8" {
		t.Errorf("net member = %q", got)
	}
}
