package memkernel

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
)

func TestEndpointInspector(t *testing.T) {
	k := New()
	pol := model.DirectionPolicy{
		Tiers: []model.Tier{{Name: "t", DefaultAction: model.ActionPass, Policies: []model.PolicyRules{
			{Name: "t/p", Rules: []model.Rule{{ID: "a", Action: model.ActionAllow}, {ID: "b", Action: model.ActionDeny}}}}}},
		Profiles: []model.PolicyRules{{Name: "prof", Rules: []model.Rule{{ID: "c", Action: model.ActionAllow}}}},
	}
	ep := &model.Endpoint{ID: model.WorkloadID{Workload: "w"}, Iface: "caliw", Ingress: pol}
	if err := k.ApplyEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	var ki engine.EndpointInspector = k
	if _, ok := ki.EndpointDetails("calix"); ok {
		t.Error("details of an interface no endpoint has")
	}
	det, ok := ki.EndpointDetails("caliw")
	if !ok || !det.Ready || det.AttachMode != AttachMode || det.IngressProgram == "" || det.IngressProgram == det.EgressProgram {
		t.Fatalf("details = %+v, %v", det, ok)
	}
	k.SetLink("caliw", model.LinkDown)
	if det, _ := ki.EndpointDetails("caliw"); det.Ready {
		t.Error("ready on a down interface")
	}
	rules, ok := ki.Rules("caliw", model.Ingress)
	want := []model.RuleInfo{
		{Tier: "t", Policy: "t/p", Kind: "policy", Index: 0, RuleID: "a", Action: model.ActionAllow},
		{Tier: "t", Policy: "t/p", Kind: "policy", Index: 1, RuleID: "b", Action: model.ActionDeny},
		{Tier: "t", Index: -1, Action: model.ActionPass, Synthetic: model.SyntheticTierDefault},
		{Policy: "prof", Kind: "profile", Index: 0, RuleID: "c", Action: model.ActionAllow},
		{Index: -1, Action: model.ActionDeny, Synthetic: model.SyntheticNoMatch},
	}
	if !ok || len(rules) != len(want) {
		t.Fatalf("rules = %+v, %v", rules, ok)
	}
	for i := range want {
		if rules[i] != want[i] {
			t.Errorf("rule %d = %+v, want %+v", i, rules[i], want[i])
		}
	}
	if _, ok := ki.Rules("calix", model.Ingress); ok {
		t.Error("rules of an interface no endpoint has")
	}
}
