package polprog

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// TestSetDimensionInLaterChunk: a policy classified by a destination set
// whose index starts after a linear head, split so that a continuation
// chunk is entered before the start block, decides like the reference
// (it used to drop every packet: the chunk looked up a class that had not
// been classified yet).
func TestSetDimensionInLaterChunk(t *testing.T) {
	h := newHarness(t)
	h.bulk = true
	for name, members := range refSets {
		for _, m := range members {
			h.addMember(randSetIDs[name], m.pfx, m.proto, m.port)
		}
	}
	h.bulk = false
	h.rebuildIndex()
	pass := model.ActionPass
	p := model.DirectionPolicy{
		Tiers: []model.Tier{
			tier("t0", pass, pol("t0/p0")),
			tier("t1", pass, pol("t1/p0"), pol("t1/p1", model.Rule{Action: model.ActionLog,
				SrcNets: nets("10.0.0.0/8", "::/0"), NotDstIPSets: []string{"b"}})),
		},
		Profiles: []model.PolicyRules{{Name: "prof0", Kind: "profile", Rules: []model.Rule{{Action: model.ActionDeny,
			NotSrcNets: nets("fd00::1/128"), NotDstIPSets: []string{"b"}}}}},
	}
	spec, err := Compile(&p, model.Egress, randSetIDs, Options{MaxChunkInsns: 150})
	if err != nil {
		t.Fatal(err)
	}
	if spec.NumChunks() < 2 || spec.index == nil || len(spec.index.sets) == 0 {
		t.Fatalf("%d chunks, index %v: not the shape under test", spec.NumChunks(), spec.index != nil)
	}
	prog, err := spec.Load(h.maps)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	for _, pk := range []pkt{
		tcp("10.0.0.1", "10.0.0.9", 1, 2), tcp("10.0.0.1", "10.0.0.3", 1, 2),
		tcp("fd00::2", "fd00::9", 1, 2), tcp("fd00::2", "fd00::5", 1, 2), tcp("fd00::1", "fd00::9", 1, 2),
	} {
		ret, res := h.run(prog, pk)
		got := ruleName(prog.Rules(), res.RuleID)
		switch ret {
		case retAllow:
			got = "+" + got
		case retDeny:
		default:
			t.Errorf("packet %+v: program returned %d", pk, ret)
			continue
		}
		if want := refEval(&p, pk); got != want {
			t.Errorf("packet %+v: got %s, want %s", pk, got, want)
		}
	}
}
