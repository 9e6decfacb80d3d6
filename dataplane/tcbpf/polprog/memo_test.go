package polprog

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// sharedSetPolicy references set "a" (by source) from many rules, so its
// membership is a memoised fact; "b" is referenced once and is not.
func sharedSetPolicy() model.DirectionPolicy {
	var rules []model.Rule
	for i := range 20 {
		p := uint16(1000 + i)
		rules = append(rules, model.Rule{Action: model.ActionDeny, SrcIPSets: []string{"a"}, DstPorts: ports(p, p)})
	}
	rules = append(rules,
		model.Rule{Action: model.ActionDeny, NotSrcIPSets: []string{"a"}, DstIPSets: []string{"b"}},
		model.Rule{Action: model.ActionAllow, SrcIPSets: []string{"a"}},
	)
	return model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", rules...))}}
}

// TestMemoisedSetFacts covers the per-set lookups (the index answers
// memberships without the memo, see TestDifferential).
func TestMemoisedSetFacts(t *testing.T) {
	h := newHarness(t)
	fillTestSets(h)
	p := sharedSetPolicy()
	for _, budget := range []int{0, 200} {
		spec, err := Compile(&p, model.Ingress, testSets, Options{MaxChunkInsns: budget, NoIPSetIndex: true})
		if err != nil {
			t.Fatal(err)
		}
		if budget > 0 && spec.NumChunks() < 3 {
			t.Fatalf("budget %d: %d chunks, want the memo to cross chunks", budget, spec.NumChunks())
		}
		prog := h.load(&p, testSets, Options{MaxChunkInsns: budget, NoIPSetIndex: true})
		checkFlows(t, h, prog,
			[]pkt{tcp("10.0.0.1", "1.1.1.1", 1, 1005), tcp("10.0.0.1", "1.1.1.1", 1, 80), tcp("10.9.0.1", "10.0.0.5", 1, 80),
				tcp("10.9.0.1", "1.1.1.1", 1, 1005)},
			[]string{"p#5", "+p#21", "p#20", "default:t"})
		// Slot 0 is "a": known (low half) for every packet that reached it,
		// member (high half) only when the source is in it.
		_, res := h.run(prog, tcp("10.0.0.1", "1.1.1.1", 1, 80))
		if got := res.PolScratch[0]; got != 1|1<<32 {
			t.Errorf("budget %d: member packet scratch %#x, want known+member bit", budget, got)
		}
		_, res = h.run(prog, tcp("10.9.0.1", "1.1.1.1", 1, 80))
		if got := res.PolScratch[0]; got != 1 {
			t.Errorf("budget %d: non-member packet scratch %#x, want only the known bit", budget, got)
		}
	}
}
