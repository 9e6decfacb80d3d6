package engine

import (
	"context"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

func kindPolicy(kind, name string, in ...*felix.Rule) *felix.ToDataplane {
	return td(&felix.ActivePolicyUpdate{Id: &felix.PolicyID{Name: name, Kind: kind},
		Policy: &felix.Policy{InboundRules: in, OutboundRules: []*felix.Rule{allowFrom()}}})
}

// tieredWep is workload wl whose ingress goes through tiers, each a list
// of (kind, name) policies with the tier's default action.
func tieredWep(wl, ip string, tiers ...*felix.TierInfo) *felix.ToDataplane {
	return td(&felix.WorkloadEndpointUpdate{Id: wepID(wl), Endpoint: &felix.WorkloadEndpoint{
		State: "active", Name: "cali" + wl, Ipv4Nets: []string{ip + "/32"}, Tiers: tiers}})
}

func tierOf(name, defaultAction string, pols ...*felix.PolicyID) *felix.TierInfo {
	return &felix.TierInfo{Name: name, DefaultAction: defaultAction, IngressPolicies: pols}
}

func pid(kind, name string) *felix.PolicyID { return &felix.PolicyID{Name: name, Kind: kind} }

func tierNames(p model.DirectionPolicy) (out []string) {
	for _, t := range p.Tiers {
		out = append(out, t.Name)
	}
	return out
}

// Staged policies are never enforced: not compiled into the endpoint's
// tier, not required to exist, and a tier of only staged policies does
// not end in its default action (it is not there at all).
func TestStagedPoliciesNotEnforced(t *testing.T) {
	h := newHarness(t)
	h.session()
	const gnp = "GlobalNetworkPolicy"
	h.send(
		kindPolicy(model.KindStagedGlobalNetworkPolicy, "staged-deny", &felix.Rule{Action: "deny"}),
		kindPolicy(gnp, "allow-all", &felix.Rule{Action: "allow"}),
		kindPolicy(model.KindStagedNetworkPolicy, "staged-ns-deny", &felix.Rule{Action: "deny"}),
		tieredWep("a", "10.65.0.1",
			// A staged deny before the enforced allow: only the allow counts.
			tierOf("security", "Deny", pid(model.KindStagedGlobalNetworkPolicy, "staged-deny"), pid(gnp, "allow-all")),
		),
		tieredWep("b", "10.65.0.2",
			// Only staged policies (one never sent): the tier must not deny;
			// the next tier decides.
			tierOf("security", "Deny", pid(model.KindStagedNetworkPolicy, "staged-ns-deny"),
				pid(model.KindStagedKubernetesNetworkPolicy, "never-sent")),
			tierOf("default", "Deny", pid(gnp, "allow-all")),
		),
		inSync(),
	)
	for _, wl := range []string{"a", "b"} {
		if st, reason := h.endpointStatus(wl); st != statusUp {
			t.Fatalf("%s: status %q (%s)", wl, st, reason)
		}
	}
	a, _ := h.k.Endpoint(wid("a"))
	if got := tierNames(a.Ingress); len(got) != 1 || len(a.Ingress.Tiers[0].Policies) != 1 ||
		a.Ingress.Tiers[0].Policies[0].Name != "security/"+gnp+":allow-all" || a.Ingress.Tiers[0].DefaultAction != model.ActionDeny {
		t.Fatalf("a's ingress: %+v", a.Ingress.Tiers)
	}
	b, _ := h.k.Endpoint(wid("b"))
	if got := tierNames(b.Ingress); len(got) != 1 || got[0] != "default" {
		t.Fatalf("b's ingress tiers %v, want only default (the staged-only tier left out)", got)
	}

	// A staged policy's rules changing changes nothing that is enforced.
	before := writes(h.k.Calls())
	h.send(kindPolicy(model.KindStagedGlobalNetworkPolicy, "staged-deny", &felix.Rule{Action: "allow"}, &felix.Rule{Action: "deny"}))
	if after := writes(h.k.Calls()); after != before {
		t.Fatalf("a staged policy edit wrote to the kernel (%d -> %d writes)", before, after)
	}

	pols, err := h.e.Policies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	staged := map[string]bool{}
	for _, p := range pols {
		staged[p.Name] = p.Staged
	}
	if !staged[model.KindStagedGlobalNetworkPolicy+":staged-deny"] || staged[gnp+":allow-all"] {
		t.Fatalf("Inspect staged flags %v", staged)
	}
	h.noViolations()
}

func TestIsStagedKind(t *testing.T) {
	for kind, want := range map[string]bool{
		"StagedNetworkPolicy": true, "StagedGlobalNetworkPolicy": true, "StagedKubernetesNetworkPolicy": true,
		"NetworkPolicy": false, "GlobalNetworkPolicy": false, "KubernetesNetworkPolicy": false, "": false,
	} {
		if model.IsStagedKind(kind) != want {
			t.Errorf("IsStagedKind(%q) = %v", kind, !want)
		}
	}
}
