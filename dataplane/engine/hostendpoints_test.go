package engine

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

func hepName(id, iface string, policies ...string) *felix.ToDataplane {
	ep := &felix.HostEndpoint{Name: iface}
	if len(policies) > 0 {
		ti := &felix.TierInfo{Name: "default"}
		for _, p := range policies {
			ti.IngressPolicies = append(ti.IngressPolicies, &felix.PolicyID{Name: p})
		}
		ep.Tiers = []*felix.TierInfo{ti}
	}
	return td(&felix.HostEndpointUpdate{Id: &felix.HostEndpointID{EndpointId: id}, Endpoint: ep})
}

func hepIPs(id string, ips ...string) *felix.ToDataplane {
	return td(&felix.HostEndpointUpdate{Id: &felix.HostEndpointID{EndpointId: id},
		Endpoint: &felix.HostEndpoint{ExpectedIpv4Addrs: ips}})
}

func hepRemove(id string) *felix.ToDataplane {
	return td(&felix.HostEndpointRemove{Id: &felix.HostEndpointID{EndpointId: id}})
}

// hostLinks declares the node's interfaces, with their addresses, and
// waits until the engine has taken them in.
func (h *harness) hostLinks(links map[string][]string) {
	h.t.Helper()
	testutil.WaitFor(h.t, waitTimeout, "engine watching host links", func() bool { return h.k.HostWatchers() == 1 })
	for name, addrs := range links {
		u := model.HostLinkUpdate{Name: name, State: model.LinkUp}
		for _, a := range addrs {
			u.Addrs = append(u.Addrs, netip.MustParseAddr(a))
		}
		if addrs == nil {
			u.State = model.LinkAbsent
		}
		h.k.SetHostLink(u)
	}
	h.flush()
}

func (h *harness) hostStatuses() map[string]string {
	seen := map[string]string{}
	for _, m := range h.sess.snapshot() {
		switch u := m.(type) {
		case *HostStatus:
			seen[u.ID] = u.Status
		case *HostRemoved:
			seen[u.ID] = "removed"
		}
	}
	return seen
}

func (h *harness) wantBinding(want map[string]string) {
	h.t.Helper()
	if got := h.k.HostBinding(); !reflect.DeepEqual(got, want) {
		h.t.Fatalf("host binding %v, want %v", got, want)
	}
}

func (h *harness) wantHostStatuses(want map[string]string) {
	h.t.Helper()
	if got := h.hostStatuses(); !reflect.DeepEqual(got, want) {
		h.t.Fatalf("host statuses %v, want %v", got, want)
	}
}

var nodeLinks = map[string][]string{
	"eth0": {"10.0.0.1"}, "eth1": {"10.0.1.1"}, "eth2": {}, "lo": {"127.0.0.1"},
	"vxlan.calico": {"10.244.0.1"}, "kube-ipvs0": {"10.96.0.1"}, "caliabc": {},
}

// Binding by name, by expected address and by wildcard; the wildcard never
// takes workload interfaces, the loopback, dpd's tunnel or excluded ones.
func TestHostEndpointBinding(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.hostLinks(nodeLinks)
	h.send(config("InterfacePrefix", "cali"), hepName("byname", "eth0"), hepIPs("byip", "10.0.1.1"), hepName("all", "*"))
	if n := h.k.Calls()[memkernel.MethodApplyHostEndpoint]; n != 0 {
		t.Fatalf("%d host endpoint applies before InSync", n)
	}
	h.send(inSync())
	h.wantBinding(map[string]string{"eth0": "byname", "eth1": "byip", "eth2": "all"})
	h.wantHostStatuses(map[string]string{"byname": "up", "byip": "up", "all": "up"})
	// No tiers, no profiles: nothing to or from the host is allowed.
	ep := h.k.HostEnforced()["eth0"]
	if ep.ID != model.HostIfaceID("byname", "eth0") || len(ep.Ingress.Tiers)+len(ep.Ingress.Profiles)+len(ep.Egress.Tiers)+len(ep.Egress.Profiles) != 0 {
		t.Fatalf("enforced on eth0: %+v", ep)
	}

	// Re-sent unchanged: no kernel write.
	h.k.ResetCalls()
	h.send(hepName("byname", "eth0"), hepIPs("byip", "10.0.1.1"), hepName("all", "*"))
	if w := writes(h.k.Calls()); w != 0 {
		t.Fatalf("unchanged resend wrote %d times: %v", w, h.k.Calls())
	}

	// The expected address moves to eth2: byip follows it, the wildcard
	// takes eth1 over. Two applies, nothing else.
	h.k.ResetCalls()
	h.hostLinks(map[string][]string{"eth1": {}, "eth2": {"10.0.1.1"}})
	h.wantBinding(map[string]string{"eth0": "byname", "eth1": "all", "eth2": "byip"})
	if c := h.k.Calls(); c[memkernel.MethodApplyHostEndpoint] != 2 || c[memkernel.MethodRemoveHostEndpoint] != 0 {
		t.Fatalf("calls after the address moved: %v", c)
	}

	// A new interface is the wildcard's; one that goes is released.
	h.hostLinks(map[string][]string{"eth3": {}, "eth1": nil})
	h.wantBinding(map[string]string{"eth0": "byname", "eth2": "byip", "eth3": "all"})

	// Removing the named endpoint hands eth0 to the wildcard.
	h.send(hepRemove("byname"))
	h.wantBinding(map[string]string{"eth0": "all", "eth2": "byip", "eth3": "all"})
	h.wantHostStatuses(map[string]string{"byname": "removed", "byip": "up", "all": "up"})

	// Removing the wildcard unpolices what it held.
	h.k.ResetCalls()
	h.send(hepRemove("all"))
	h.wantBinding(map[string]string{"eth2": "byip"})
	if c := h.k.Calls(); c[memkernel.MethodRemoveHostEndpoint] != 2 {
		t.Fatalf("calls after the wildcard went: %v", c)
	}
	h.noViolations()
}

// InterfaceExclude from ConfigUpdate replaces the default; a host
// endpoint naming an excluded interface binds nothing and is "down".
func TestHostEndpointExclude(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.InterfaceExclude = "kube-ipvs0,/^eth[2-9]$/" })
	h.session()
	h.hostLinks(nodeLinks)
	h.send(hepName("all", "*"), hepName("lo", "lo"), hepName("ipvs", "kube-ipvs0"), inSync())
	h.wantBinding(map[string]string{"eth0": "all", "eth1": "all"})
	h.wantHostStatuses(map[string]string{"all": "up", "lo": "down", "ipvs": "down"})
	if info, _ := h.e.HostEndpoint("ipvs"); info.Reason != "interface kube-ipvs0: excluded by InterfaceExclude" {
		t.Fatalf("reason %q", info.Reason)
	}
	h.send(config("InterfaceExclude", "eth1"))
	h.wantBinding(map[string]string{"eth0": "all", "eth2": "all", "kube-ipvs0": "ipvs"})
	h.wantHostStatuses(map[string]string{"all": "up", "lo": "down", "ipvs": "up"})
	h.noViolations()
}

// A failed apply is "error" and retried; a policy change re-applies; a
// missing policy keeps what is enforced and reports it.
func TestHostEndpointPolicyAndFailure(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.hostLinks(map[string][]string{"eth0": {"10.0.0.1"}})
	h.k.FailNext(memkernel.MethodApplyHostEndpoint, errors.New("boom"))
	h.send(policy("p1", denyPort(80)), hepName("h", "eth0", "p1"), inSync())
	testutil.WaitFor(t, waitTimeout, "retried to up", func() bool { return h.hostStatuses()["h"] == "up" })
	if n := h.k.Calls()[memkernel.MethodApplyHostEndpoint]; n != 2 {
		t.Fatalf("%d applies, want 2 (one failed, one retried)", n)
	}
	first := h.k.HostEnforced()["eth0"]
	if len(first.Ingress.Tiers) != 1 || first.Ingress.Tiers[0].Policies[0].Name != "default/p1" {
		t.Fatalf("ingress %+v", first.Ingress)
	}
	h.send(policy("p1", denyPort(81)))
	if got := h.k.HostEnforced()["eth0"]; got.Ingress.Hash() == first.Ingress.Hash() {
		t.Fatal("policy change not applied")
	}
	h.k.ResetCalls()
	h.send(policyRemove("p1"))
	if info, _ := h.e.HostEndpoint("h"); info.Status != statusError || info.Reason != "missing policy p1" {
		t.Fatalf("status %q %q", info.Status, info.Reason)
	}
	if w := writes(h.k.Calls()); w != 0 {
		t.Fatalf("missing policy wrote %d times", w)
	}
	h.noViolations()
}

// forward_tiers become the forward policy (no profiles), per direction
// only where a tier has policies; a change of it alone is re-applied.
func TestHostEndpointForward(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.hostLinks(map[string][]string{"eth0": {"10.0.0.1"}})
	hep := func(pols ...string) *felix.ToDataplane {
		ti := &felix.TierInfo{Name: "default"}
		for _, p := range pols {
			ti.IngressPolicies = append(ti.IngressPolicies, &felix.PolicyID{Name: p})
		}
		return td(&felix.HostEndpointUpdate{Id: &felix.HostEndpointID{EndpointId: "h"},
			Endpoint: &felix.HostEndpoint{Name: "eth0", ProfileIds: []string{"prof"}, ForwardTiers: []*felix.TierInfo{ti}}})
	}
	h.send(profile("prof", allowFrom()), policy("f1", denyPort(80)), policy("f2", denyPort(81)), hep("f1"), inSync())
	ep := h.k.HostEnforced()["eth0"]
	if ep == nil || ep.Forward == nil || !ep.Forward.HasIngress || ep.Forward.HasEgress ||
		len(ep.Forward.Ingress.Profiles) != 0 || ep.Forward.Ingress.Tiers[0].Policies[0].Name != "default/f1" {
		t.Fatalf("enforced %+v", ep)
	}
	if len(ep.Ingress.Tiers) != 0 || len(ep.Ingress.Profiles) != 1 {
		t.Fatalf("normal ingress %+v", ep.Ingress)
	}
	h.k.ResetCalls()
	h.send(hep("f2"))
	if n := h.k.Calls()[memkernel.MethodApplyHostEndpoint]; n != 1 {
		t.Fatalf("%d applies after a forward-only change, want 1", n)
	}
	h.noViolations()
}

// The wildcard's ingress policy is what DefaultEndpointToHostAction Return
// applies to workload traffic to the host: handed to the kernel when it
// changes, withdrawn (nil) when the wildcard goes.
func TestHostEndpointToHostPolicy(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.hostLinks(map[string][]string{"eth0": {"10.0.0.1"}})
	h.send(policy("p1", denyPort(80)), hepName("all", "*", "p1"), inSync())
	pol := h.k.ToHostPolicy()
	if pol == nil || len(pol.Tiers) != 1 || pol.Tiers[0].Policies[0].Name != "default/p1" {
		t.Fatalf("to-host policy %+v", pol)
	}
	h.k.ResetCalls()
	h.send(hepName("all", "*", "p1"))
	if n := h.k.Calls()[memkernel.MethodApplyToHostPolicy]; n != 0 {
		t.Fatalf("unchanged wildcard re-sent: %d to-host applies", n)
	}
	h.send(hepRemove("all"))
	if pol := h.k.ToHostPolicy(); pol != nil || h.k.Calls()[memkernel.MethodApplyToHostPolicy] != 1 {
		t.Fatalf("after the wildcard went: %+v, %v", pol, h.k.Calls())
	}
	h.noViolations()
}

// A host endpoint update that cannot be read, but names its endpoint,
// leaves that endpoint's interfaces enforcing no policy (deny, failsafes
// excepted) in status "error", never its older, possibly more permissive
// policy; a valid update repairs it. An unknown endpoint's binds nothing.
func TestRejectedHostEndpointFailsClosed(t *testing.T) {
	h := newHarness(t)
	h.session()
	h.hostLinks(nodeLinks)
	h.send(policy("open", allowFrom()), hepName("byname", "eth0", "open"), inSync())
	h.wantHostStatuses(map[string]string{"byname": "up"})
	if ep := h.k.HostEnforced()["eth0"]; len(ep.Ingress.Tiers) != 1 {
		t.Fatalf("enforced on eth0 before: %+v", ep)
	}
	bad := hepName("byname", "eth0", "open")
	bad.GetHostEndpointUpdate().Endpoint.ExpectedIpv4Addrs = []string{"not-an-address"}
	bad2 := hepName("other", "eth1")
	bad2.GetHostEndpointUpdate().Endpoint.ExpectedIpv4Addrs = []string{"not-an-address"}
	for _, m := range []*felix.ToDataplane{bad, bad2} {
		if err := submitFelix(h.ctx, h.sess, m); err != nil {
			t.Fatal(err)
		}
	}
	h.flush()
	h.wantHostStatuses(map[string]string{"byname": "error", "other": "error"})
	ep := h.k.HostEnforced()["eth0"]
	if ep == nil || len(ep.Ingress.Tiers)+len(ep.Ingress.Profiles)+len(ep.Egress.Tiers)+len(ep.Egress.Profiles) != 0 {
		t.Fatalf("eth0 still enforces %+v after its endpoint's update was rejected", ep)
	}
	h.wantBinding(map[string]string{"eth0": "byname"})
	if st := h.e.Status(); st.InvalidMessages != 2 {
		t.Fatalf("invalid messages %d, want 2", st.InvalidMessages)
	}
	h.send(hepName("byname", "eth0", "open"))
	h.wantHostStatuses(map[string]string{"byname": "up", "other": "error"})
	if ep := h.k.HostEnforced()["eth0"]; len(ep.Ingress.Tiers) != 1 {
		t.Fatalf("enforced on eth0 after the valid update: %+v", ep)
	}
}
