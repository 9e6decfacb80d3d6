package polprog

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func pinDirFor(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpd-polprog-pin-%d", os.Getpid()), t.Name())
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(dir)) })
	return dir
}

// loadPinned loads spec into h's maps and pins it in a fresh directory.
func loadPinned(t *testing.T, h *harness, spec *Spec) (*Program, string) {
	t.Helper()
	prog, err := spec.Load(h.maps)
	if err != nil {
		t.Fatal(err)
	}
	dir := pinDirFor(t)
	if err := prog.Pin(dir); err != nil {
		t.Fatal(err)
	}
	return prog, dir
}

// TestPinAdopt: a program pinned by one "process" is adopted by the next
// one without loading anything, enforces the same verdicts, keeps its
// chain indices reserved, and is refused when it is not what the policy
// compiles to now: a split linear program, and an indexed one whose
// per-program maps must hold what the policy needs.
func TestPinAdopt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strategy Strategy
	}{{"linear-split", StrategyLinear}, {"indexed", StrategyIndexed}} {
		t.Run(tc.name, func(t *testing.T) { testPinAdopt(t, tc.strategy) })
	}
}

func testPinAdopt(t *testing.T, strategy Strategy) {
	h := newHarness(t)
	big := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", portRules(400, 10000)...))}}
	opts := Options{MaxChunkInsns: 1000, Strategy: strategy}
	spec, err := Compile(&big, model.Ingress, testSets, opts)
	if err != nil {
		t.Fatal(err)
	}
	if strategy == StrategyLinear && spec.NumChunks() < 3 {
		t.Fatalf("want a split program, got %d chunks", spec.NumChunks())
	}
	if (spec.index != nil) != (strategy == StrategyIndexed) {
		t.Fatalf("strategy %d: index %v", strategy, spec.index != nil)
	}
	prog, dir := loadPinned(t, h, spec)
	allowed := tcp("1.1.1.1", "2.2.2.2", 1, 10000+399)
	denied := tcp("1.1.1.1", "2.2.2.2", 1, 9999)
	if ret, _ := h.run(prog, allowed); ret != retAllow {
		t.Fatalf("loaded program: %d for an allowed packet", ret)
	}
	headID, idx := prog.HeadID(), prog.ChainIndices()
	prog.Abandon() // "restart"

	pinned, err := OpenPinned(dir, h.maps.Chain)
	if err != nil {
		t.Fatal(err)
	}
	if pinned.HeadID() != headID {
		t.Fatalf("pinned head %d, loaded %d", pinned.HeadID(), headID)
	}
	for _, i := range idx {
		if !ChainIndexInUse(h.maps.Chain, i) {
			t.Errorf("chain index %d of the pinned program is not reserved", i)
		}
	}
	// A new load while the pinned one waits must not take its indices.
	other, err := Compile(&big, model.Egress, testSets, opts)
	if err != nil {
		t.Fatal(err)
	}
	otherProg, err := other.Load(h.maps)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range otherProg.ChainIndices() {
		for _, j := range idx {
			if i == j {
				t.Errorf("new program took reserved chain index %d", i)
			}
		}
	}
	_ = otherProg.Close()

	// A different policy does not adopt it: neither one with other
	// chunks nor one of the same shape with other constants.
	for _, rules := range [][]model.Rule{portRules(399, 10000), portRules(400, 10001)} {
		diff := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", rules...))}}
		diffSpec, err := Compile(&diff, model.Ingress, testSets, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := diffSpec.Adopt(h.maps, pinned); err == nil {
			t.Fatalf("adopted a pinned program for a different policy (%d chunks)", diffSpec.NumChunks())
		}
	}

	// The same policy adopts it: same head, verdicts intact.
	spec2, err := Compile(&big, model.Ingress, testSets, opts)
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := spec2.Adopt(h.maps, pinned)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if (adopted.own != nil) != (strategy == StrategyIndexed) {
		t.Errorf("adopted per-program maps: %v", adopted.own != nil)
	}
	t.Cleanup(func() { _ = adopted.Close() })
	if adopted.HeadID() != headID || fmt.Sprint(adopted.ChainIndices()) != fmt.Sprint(idx) {
		t.Fatalf("adopted head %d idx %v, want %d %v", adopted.HeadID(), adopted.ChainIndices(), headID, idx)
	}
	if ret, _ := h.run(adopted, allowed); ret != retAllow {
		t.Errorf("adopted program: %d for an allowed packet", ret)
	}
	if ret, _ := h.run(adopted, denied); ret != retDeny {
		t.Errorf("adopted program: %d for a denied packet", ret)
	}
	if adopted.PinDir() != dir {
		t.Errorf("adopted pin dir %q, want %q", adopted.PinDir(), dir)
	}
	if err := adopted.Unpin(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("pins left after Unpin: %v", err)
	}
}

// TestPinnedRelease: an unclaimed pinned program gives back its chain
// entries and indices, and an interrupted pin is refused.
func TestPinnedRelease(t *testing.T) {
	h := newHarness(t)
	big := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", portRules(300, 10000)...))}}
	spec, err := Compile(&big, model.Ingress, testSets, Options{MaxChunkInsns: 1000})
	if err != nil {
		t.Fatal(err)
	}
	prog, dir := loadPinned(t, h, spec)
	idx := prog.ChainIndices()
	prog.Abandon()

	pinned, err := OpenPinned(dir, h.maps.Chain)
	if err != nil {
		t.Fatal(err)
	}
	if err := pinned.Release(true); err != nil {
		t.Fatal(err)
	}
	for _, i := range idx {
		if ChainIndexInUse(h.maps.Chain, i) {
			t.Errorf("index %d still reserved", i)
		}
		var id uint32
		if err := h.maps.Chain.Lookup(i, &id); err == nil {
			t.Errorf("dpd_chain[%d] still holds program %d", i, id)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("pins left after Release(true): %v", err)
	}

	// A directory without its head is an interrupted pin.
	prog2, err := spec.Load(h.maps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prog2.Close() })
	if err := prog2.Pin(dir); err != nil {
		t.Fatal(err)
	}
	heads, _ := filepath.Glob(filepath.Join(dir, pinHeadPrefix+"*"))
	if len(heads) != 1 {
		t.Fatalf("want one head pin, got %v", heads)
	}
	if err := os.Remove(heads[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPinned(dir, h.maps.Chain); err == nil {
		t.Fatal("opened a pin directory without its head")
	}
}

// TestAdoptEitherEpilogueCall: where the epilogue may be called directly,
// a pinned program is adopted in the form it was loaded in, indirect (not
// yet reloaded) or direct, and says which; without the epilogue arrays
// only the indirect form is.
func TestAdoptEitherEpilogueCall(t *testing.T) {
	h := newHarness(t)
	if h.maps.Epilogue == nil {
		t.Fatal("harness without an epilogue array")
	}
	pol := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", portRules(3, 10000)...))}}
	allowed := tcp("1.1.1.1", "2.2.2.2", 1, 10002)
	indirectMaps := h.maps
	indirectMaps.Epilogue, indirectMaps.Epilogues = nil, nil
	for _, tc := range []struct {
		name        string
		load, adopt Maps
		wantDirect  bool
		wantRefusal bool
	}{
		{"indirect, adopted where direct is possible", indirectMaps, h.maps, false, false},
		{"direct, adopted where direct is possible", h.maps, h.maps, true, false},
		{"direct, refused without epilogue arrays", h.maps, indirectMaps, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := Compile(&pol, model.Ingress, testSets, Options{})
			if err != nil {
				t.Fatal(err)
			}
			prog, err := spec.Load(tc.load)
			if err != nil {
				t.Fatal(err)
			}
			if prog.DirectEpilogue() != (tc.load.Epilogue != nil) {
				t.Fatalf("loaded: direct %v", prog.DirectEpilogue())
			}
			dir := pinDirFor(t)
			if err := prog.Pin(dir); err != nil {
				t.Fatal(err)
			}
			prog.Abandon()
			pinned, err := OpenPinned(dir, h.maps.Chain)
			if err != nil {
				t.Fatal(err)
			}
			adopted, err := spec.Adopt(tc.adopt, pinned)
			if tc.wantRefusal {
				if err == nil {
					_ = adopted.Close()
					t.Fatal("adopted a direct program without epilogue arrays")
				}
				_ = pinned.Release(true)
				return
			}
			if err != nil {
				t.Fatalf("adopt: %v", err)
			}
			t.Cleanup(func() { _ = adopted.Close() })
			if adopted.DirectEpilogue() != tc.wantDirect {
				t.Errorf("adopted: direct %v, want %v", adopted.DirectEpilogue(), tc.wantDirect)
			}
			if ret, _ := h.run(adopted, allowed); ret != retAllow {
				t.Errorf("adopted program: %d for an allowed packet", ret)
			}
		})
	}
}
