package felixwire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/proto/felixlegacy"
)

// TestEncoderRemovalNamesItsTier: an older client keys policies by tier
// and name, so a removal must name the tier its update did; one the
// stream never sent an update for is named in the default tier.
func TestEncoderRemovalNamesItsTier(t *testing.T) {
	e := NewEncoder()
	id := &felix.PolicyID{Name: "sec.allow", Kind: KindGlobalNetworkPolicy}
	upd := &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
		Id: id, Policy: &felix.Policy{Tier: "sec"}}}}
	rm := func(id *felix.PolicyID) *felix.ToDataplane {
		return &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyRemove{ActivePolicyRemove: &felix.ActivePolicyRemove{Id: id}}}
	}
	tierOf := func(b []byte) (string, string) {
		t.Helper()
		m := &felixlegacy.ToDataplane{}
		if err := proto.Unmarshal(b, m); err != nil {
			t.Fatal(err)
		}
		lid := m.GetActivePolicyUpdate().GetId()
		if lid == nil {
			lid = m.GetActivePolicyRemove().GetId()
		}
		return lid.GetTier(), lid.GetName()
	}
	for _, step := range []struct {
		msg        *felix.ToDataplane
		gen        Generation
		tier, name string
	}{
		{upd, Current, "", ""}, // sent in the current form: noted all the same
		{rm(id), Legacy, "sec", "sec.allow"},
		{rm(id), Legacy, "default", "sec.allow"}, // forgotten with its removal
		{upd, Legacy, "sec", "sec.allow"},
		{rm(&felix.PolicyID{Name: "other", Kind: KindGlobalNetworkPolicy}), Legacy, "default", "other"},
	} {
		b, err := e.Marshal(step.msg, step.gen)
		if err != nil {
			t.Fatal(err)
		}
		if step.gen != Legacy {
			continue
		}
		if tier, name := tierOf(b); tier != step.tier || name != step.name {
			t.Errorf("%v: tier %q name %q, want %q %q", step.msg, tier, name, step.tier, step.name)
		}
	}
	if len(e.tiers) != 1 {
		t.Errorf("encoder keeps %d tiers, want 1 (the policy sent last)", len(e.tiers))
	}
}
