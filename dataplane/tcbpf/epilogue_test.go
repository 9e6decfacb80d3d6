package tcbpf

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// TestEpilogueArrays: a policy loaded with an epilogue array decides
// through the real epilogue (its rule counter counts the packet), and only
// through that array (with the array emptied the packet drops, uncounted);
// a restart reuses the pinned arrays and reinstalls a missing epilogue,
// also when it calls the epilogue indirectly itself.
func TestEpilogueArrays(t *testing.T) {
	pinDir := testPinDir(t)
	d := openTest(t, Options{PinDir: pinDir, Epilogue: EpilogueDirect})
	epi, err := d.Programs().Epilogue.Info()
	mustNil(t, err)
	epiID, _ := epi.ID()
	seen := map[*ebpf.Map]bool{}
	for range 2 * epilogueArrays {
		seen[d.EpilogueArray()] = true
	}
	if len(seen) != epilogueArrays {
		t.Fatalf("%d arrays handed out, want %d", len(seen), epilogueArrays)
	}
	ids := map[ebpf.MapID]bool{}
	for m := range seen {
		var cur uint32
		mustNil(t, m.Lookup(uint32(0), &cur))
		if ebpf.ProgramID(cur) != epiID {
			t.Fatalf("array holds program %d, want the epilogue %d", cur, epiID)
		}
		info, err := m.Info()
		mustNil(t, err)
		id, _ := info.ID()
		ids[id] = true
	}

	ifA, _ := vethPair(t)
	pol := model.DirectionPolicy{Tiers: []model.Tier{{Name: "t", DefaultAction: model.ActionDeny,
		Policies: []model.PolicyRules{{Name: "t/p", Kind: "policy", Rules: []model.Rule{{Action: model.ActionAllow}}}}}}}
	spec, err := polprog.Compile(&pol, model.Egress, noSets{}, polprog.Options{})
	mustNil(t, err)
	arr := d.EpilogueArray()
	m := d.Maps()
	prog, err := spec.Load(polprog.Maps{State: m.State, Jump: m.Jump, IPSets: m.IPSets, RuleCtrs: m.RuleCtrs,
		Chain: m.Chain, Epilogue: arr})
	mustNil(t, err)
	defer func() { _ = prog.Close() }()
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, prog.Head()))
	ctr := prog.Rules()[0].CounterID
	src, dst := netip.MustParseAddr("10.7.0.1"), netip.MustParseAddr("10.7.0.2")
	if got := run(t, d, abi.DirFromWEP, ifA, udpPkt(src, dst, 1000, 53)); got != abi.TCActOK {
		t.Fatalf("allowed flow: verdict %d, want pass", got)
	}
	if pk, _, err := d.ReadCounter(ctr); err != nil || pk != 1 {
		t.Fatalf("rule counter %d packets (%v), want 1", pk, err)
	}
	mustNil(t, arr.Delete(uint32(0)))
	if got := run(t, d, abi.DirFromWEP, ifA, udpPkt(src, dst, 1001, 53)); got != abi.TCActShot {
		t.Fatalf("without the array's epilogue: verdict %d, want drop", got)
	}
	if pk, _, err := d.ReadCounter(ctr); err != nil || pk != 1 {
		t.Fatalf("rule counter %d packets (%v) after a failed tail call, want 1", pk, err)
	}

	d2 := openTest(t, Options{PinDir: pinDir, Epilogue: EpilogueDirect})
	for range epilogueArrays {
		info, err := d2.EpilogueArray().Info()
		mustNil(t, err)
		if id, _ := info.ID(); !ids[id] {
			t.Fatalf("restart created epilogue array %d instead of reusing the pins", id)
		}
	}
	// The program loaded before the restart reaches an epilogue again.
	if got := run(t, d2, abi.DirFromWEP, ifA, udpPkt(src, dst, 1002, 53)); got != abi.TCActOK {
		t.Fatalf("after restart: verdict %d, want pass", got)
	}
	if pk, _, err := d2.ReadCounter(ctr); err != nil || pk != 2 {
		t.Fatalf("rule counter %d packets (%v) after restart, want 2", pk, err)
	}

	// A restart that calls the epilogue indirectly still fills the arrays
	// the earlier programs call.
	mustNil(t, arr.Delete(uint32(0)))
	d3 := openTest(t, Options{PinDir: pinDir, Epilogue: EpilogueIndirect})
	if got := run(t, d3, abi.DirFromWEP, ifA, udpPkt(src, dst, 1003, 53)); got != abi.TCActOK {
		t.Fatalf("after an indirect restart: verdict %d, want pass", got)
	}
}

// TestEpilogueCallChoice: the probe's programs reach their target both
// ways, a configured mode is taken as it is, and indirect calls leave no
// epilogue arrays to hand out.
func TestEpilogueCallChoice(t *testing.T) {
	d := openTest(t, Options{Epilogue: EpilogueIndirect})
	if m := d.EpilogueArray(); m != nil || len(d.EpilogueArrays()) != 0 {
		t.Fatalf("indirect epilogue calls hand out arrays")
	}
	in, dir, err := probeTailCalls()
	mustNil(t, err)
	if in <= 0 || dir <= 0 {
		t.Fatalf("probe measured indirect %v, direct %v", in, dir)
	}
	for mode, want := range map[EpilogueCall]bool{EpilogueDirect: true, EpilogueIndirect: false} {
		if got, why, decided := chooseEpilogueCall(mode); got != want || why != "configured" || !decided {
			t.Errorf("mode %d: direct %v (%s), want %v (configured)", mode, got, why, want)
		}
	}
}

// TestEpilogueChoicePinned: an automatic choice is what the pinned
// programs call, so a restart keeps it whatever its probe would read; a
// configured mode replaces it for the restarts after.
func TestEpilogueChoicePinned(t *testing.T) {
	pinDir := testPinDir(t)
	d := openTest(t, Options{PinDir: pinDir, Epilogue: EpilogueIndirect})
	if d.EpilogueArray() != nil {
		t.Fatal("configured indirect calls hand out arrays")
	}
	// One side of the two is not what the probe reads here.
	if d := openTest(t, Options{PinDir: pinDir}); d.EpilogueArray() != nil {
		t.Fatal("a restart on auto left the pinned indirect choice")
	}
	openTest(t, Options{PinDir: pinDir, Epilogue: EpilogueDirect})
	if d := openTest(t, Options{PinDir: pinDir}); d.EpilogueArray() == nil {
		t.Fatal("a restart on auto left the pinned direct choice")
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, epilogueDir, epilogueChoicePin), nil)
	mustNil(t, err)
	defer func() { _ = m.Close() }()
	mustNil(t, m.Update(uint32(0), uint32(0), ebpf.UpdateAny))
	openTest(t, Options{PinDir: pinDir})
	var v uint32
	mustNil(t, m.Lookup(uint32(0), &v))
	if v != choiceDirect && v != choiceIndirect {
		t.Fatalf("a dpd without a pinned choice pinned %d", v)
	}
}
