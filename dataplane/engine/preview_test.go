package engine

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// With StagedPreview, a direction with staged policies gets a preview with
// them enforced in their tier order (a staged-only tier ends in its
// default action there); the enforced policy is what it was, a direction
// without staged policies has no preview, and editing a staged policy
// re-applies the endpoint with the new preview.
func TestStagedPreviewResolved(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.StagedPreview = true })
	h.session()
	const gnp = "GlobalNetworkPolicy"
	h.send(
		kindPolicy(model.KindStagedNetworkPolicy, "lock", &felix.Rule{Action: "deny"}),
		kindPolicy(gnp, "allow-all", &felix.Rule{Action: "allow"}),
		tieredWep("a", "10.65.0.1",
			tierOf("security", "Deny", pid(model.KindStagedNetworkPolicy, "lock"),
				pid(model.KindStagedKubernetesNetworkPolicy, "never-sent")),
			tierOf("default", "Deny", pid(gnp, "allow-all")),
		),
		inSync(),
	)
	if st, reason := h.endpointStatus("a"); st != statusUp {
		t.Fatalf("a: status %q (%s)", st, reason)
	}
	a, _ := h.k.Endpoint(wid("a"))
	if got := tierNames(a.Ingress); len(got) != 1 || got[0] != "default" {
		t.Fatalf("enforced ingress tiers %v, want only default", got)
	}
	p := a.PreviewIngress
	if p == nil || len(p.Tiers) != 2 || p.Tiers[0].Name != "security" || len(p.Tiers[0].Policies) != 1 ||
		p.Tiers[0].Policies[0].Name != "security/"+model.KindStagedNetworkPolicy+":lock" ||
		p.Tiers[0].DefaultAction != model.ActionDeny || p.Tiers[1].Name != "default" {
		t.Fatalf("ingress preview %+v: want security (lock) then default", p)
	}
	if a.PreviewEgress != nil {
		t.Fatalf("egress preview %+v: the egress has no staged policy", a.PreviewEgress)
	}

	before := a.PreviewIngress.Hash()
	h.send(kindPolicy(model.KindStagedNetworkPolicy, "lock", &felix.Rule{Action: "allow"}))
	if a, _ := h.k.Endpoint(wid("a")); a.PreviewIngress == nil || a.PreviewIngress.Hash() == before {
		t.Fatalf("ingress preview %+v after the staged edit: not re-applied", a.PreviewIngress)
	}
}
