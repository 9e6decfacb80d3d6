package polprog

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// testSetIndex is a SetIndex rebuilt from scratch on every change: a
// reference independent of dataplane/tcbpf's incremental one. Every
// member prefix of a set is an entry of dpd_ipset_idx holding the id of
// the combination of sets with a member containing it; full-length ones
// are in the hash.
type testSetIndex struct {
	t        testing.TB
	m, h     *ebpf.Map // the trie, the hash of full-length entries
	comboOf  map[string]uint32
	combos   map[uint32][]uint32
	next     uint32
	entries  map[[abi.IPSetIdxKeySize]byte]uint32
	watchers map[int]*testWatch
	nextW    int
	adds     int // combination announcements, for tests counting them
}

type testWatch struct {
	sets   []uint32
	add    func(uint32, []uint32) error
	remove func(uint32) error
}

func newTestSetIndex(t testing.TB, m, h *ebpf.Map) *testSetIndex {
	return &testSetIndex{t: t, m: m, h: h, comboOf: map[string]uint32{}, combos: map[uint32][]uint32{}, next: 1,
		entries: map[[abi.IPSetIdxKeySize]byte]uint32{}, watchers: map[int]*testWatch{}}
}

func intersects(a, b []uint32) bool {
	return slices.ContainsFunc(a, func(x uint32) bool { _, ok := slices.BinarySearch(b, x); return ok })
}

func (x *testSetIndex) WatchCombos(sets []uint32, add func(uint32, []uint32) error, remove func(uint32) error) (func(), error) {
	w := &testWatch{sets: slices.Sorted(slices.Values(sets)), add: add, remove: remove}
	for id, c := range x.combos {
		if intersects(c, w.sets) {
			if err := add(id, c); err != nil {
				return nil, err
			}
		}
	}
	n := x.nextW
	x.nextW++
	x.watchers[n] = w
	return func() { delete(x.watchers, n) }, nil
}

func comboKey(sets []uint32) string { return fmt.Sprint(sets) }

// rebuild makes the index hold what members (plain members by set id) say.
func (x *testSetIndex) rebuild(members map[uint32][]netip.Prefix) {
	x.t.Helper()
	in := map[netip.Prefix][]uint32{}
	for id, ps := range members {
		for _, p := range ps {
			in[p] = append(in[p], id)
		}
	}
	want := map[[abi.IPSetIdxKeySize]byte]uint32{}
	mapOf := func(k [abi.IPSetIdxKeySize]byte) *ebpf.Map {
		if bits := binary.NativeEndian.Uint32(k[:]) - abi.IPSetIdxKeyFixedBits; bits == 128 || (bits == 32 && k[abi.IPSetIdxKeyFamily] == 4) {
			return x.h
		}
		return x.m
	}
	used := map[uint32]bool{}
	for e := range in {
		var sets []uint32
		for l := 0; l <= e.Bits(); l++ {
			q, _ := e.Addr().Prefix(l)
			sets = append(sets, in[q]...)
		}
		slices.Sort(sets)
		sets = slices.Compact(sets)
		k := comboKey(sets)
		id, ok := x.comboOf[k]
		if !ok {
			id = x.next
			x.next++
			x.comboOf[k], x.combos[id] = id, sets
			for _, w := range x.watchers {
				if intersects(sets, w.sets) {
					x.adds++
					if err := w.add(id, sets); err != nil {
						x.t.Fatalf("announce combination %v: %v", sets, err)
					}
				}
			}
		}
		used[id] = true
		var key [abi.IPSetIdxKeySize]byte
		binary.NativeEndian.PutUint32(key[abi.IPSetIdxKeyPrefixLen:], uint32(abi.IPSetIdxKeyFixedBits+e.Bits()))
		key[abi.IPSetIdxKeyFamily] = family(e.Addr())
		copy(key[abi.IPSetIdxKeyAddr:], e.Addr().AsSlice())
		want[key] = id
	}
	for k, id := range want {
		if x.entries[k] != id {
			if err := mapOf(k).Update(k, id, ebpf.UpdateAny); err != nil {
				x.t.Fatalf("index %x: %v", k, err)
			}
		}
	}
	for k := range x.entries {
		if _, ok := want[k]; !ok {
			if err := mapOf(k).Delete(k); err != nil {
				x.t.Fatalf("unindex %x: %v", k, err)
			}
		}
	}
	x.entries = want
	for id, sets := range x.combos {
		if used[id] {
			continue
		}
		for _, w := range x.watchers {
			if intersects(sets, w.sets) {
				if err := w.remove(id); err != nil {
					x.t.Fatalf("retire combination %v: %v", sets, err)
				}
			}
		}
		delete(x.combos, id)
		delete(x.comboOf, comboKey(sets))
	}
}

// removeMember deletes a plain member from set id and reindexes.
func (h *harness) removeMember(id uint32, pfx netip.Prefix) {
	h.t.Helper()
	key := make([]byte, abi.IPSetKeySize)
	binary.NativeEndian.PutUint32(key[abi.IPSetKeyPrefixLen:], uint32(abi.IPSetKeyFixedBits+pfx.Bits()))
	binary.NativeEndian.PutUint32(key[abi.IPSetKeySetID:], id)
	key[abi.IPSetKeyFamily] = family(pfx.Addr())
	copy(key[abi.IPSetKeyAddr:], pfx.Masked().Addr().AsSlice())
	if err := h.maps.IPSets.Delete(key); err != nil {
		h.t.Fatalf("remove member %v of set %d: %v", pfx, id, err)
	}
	h.members[id] = slices.DeleteFunc(h.members[id], func(p netip.Prefix) bool { return p == pfx.Masked() })
	h.rebuildIndex()
}

// TestSetDeltas: a loaded program follows set changes without a reload,
// new combinations of sets included, in both families; only the
// combinations holding one of the program's sets are announced to it.
func TestSetDeltas(t *testing.T) {
	h := newHarness(t)
	res := resolver{"s0": 600, "s1": 601, "s2": 602, "other": 603}
	h.addMember(600, netip.MustParsePrefix("10.7.0.0/16"), 0, 0)
	h.addMember(600, netip.MustParsePrefix("fd07::/64"), 0, 0)
	h.addMember(603, netip.MustParsePrefix("10.8.0.1/32"), 0, 0)
	pol := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p",
		model.Rule{Action: model.ActionDeny, SrcIPSets: []string{"s0", "s1"}},
		model.Rule{Action: model.ActionAllow, SrcIPSets: []string{"s2"}, NotDstIPSets: []string{"s1"}},
	))}}
	prog := h.load(&pol, res, Options{})
	if prog.own == nil || prog.own.sets == nil {
		t.Fatal("two set rules are not classified by sets")
	}
	expect := func(step string, p pkt, want string) {
		t.Helper()
		ret, r := h.run(prog, p)
		got := ruleName(prog.Rules(), r.RuleID)
		if ret == retAllow {
			got = "+" + got
		}
		if got != want {
			t.Errorf("%s: %s -> %s: got %s, want %s", step, p.src, p.dst, got, want)
		}
	}
	v4, v6 := tcp("10.7.0.1", "10.9.9.9", 1, 2), tcp("fd07::1", "fd09::9", 1, 2)
	const tierDeny = "default:t"
	expect("start", v4, tierDeny)
	expect("start", v6, tierDeny)
	before := h.setIdx.adds
	h.addMember(602, netip.MustParsePrefix("10.7.0.1/32"), 0, 0) // new combination {s0, s2}
	expect("in s0, s2", v4, "+p#1")
	expect("in s0, s2", v6, tierDeny)
	h.addMember(602, netip.MustParsePrefix("fd07::1/128"), 0, 0)
	expect("in s0, s2", v6, "+p#1")
	h.addMember(601, netip.MustParsePrefix("10.7.0.0/24"), 0, 0) // {s0, s1} and {s0, s1, s2}
	expect("in s0, s1, s2", v4, "p#0")
	expect("v6 untouched", v6, "+p#1")
	h.addMember(601, netip.MustParsePrefix("10.9.9.9/32"), 0, 0) // the destination in s1
	h.removeMember(601, netip.MustParsePrefix("10.7.0.0/24"))
	expect("dst in s1", v4, tierDeny)
	h.removeMember(601, netip.MustParsePrefix("10.9.9.9/32"))
	expect("back", v4, "+p#1")
	h.removeMember(602, netip.MustParsePrefix("10.7.0.1/32"))
	expect("removed", v4, tierDeny)
	// A combination of sets the program does not use costs it nothing.
	n := h.setIdx.adds
	h.addMember(603, netip.MustParsePrefix("10.8.0.2/32"), 0, 0)
	h.addMember(603, netip.MustParsePrefix("10.8.0.0/16"), 0, 0)
	if h.setIdx.adds != n {
		t.Errorf("%d announcements of combinations without the program's sets", h.setIdx.adds-n)
	}
	if h.setIdx.adds == before {
		t.Error("no combination was announced")
	}
	// The program's entries are exactly the live combinations with its
	// sets, plus the miss entries.
	var k uint32
	var v []byte
	entries := 0
	it := prog.own.setw.inner().Iterate()
	for it.Next(&k, &v) {
		entries++
		if id := k >> 1; id != 0 && !intersects(h.setIdx.combos[id], []uint32{600, 601, 602}) {
			t.Errorf("entry for combination %d (%v)", id, h.setIdx.combos[id])
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	want := 2 // miss entries, source and destination
	for _, sets := range h.setIdx.combos {
		if intersects(sets, []uint32{600, 601, 602}) {
			want += 2
		}
	}
	if entries > want {
		t.Errorf("%d entries in %s, at most %d expected", entries, mapPolSets, want)
	}
	// Closing the program ends its watch.
	if err := prog.Close(); err != nil {
		t.Fatal(err)
	}
	if len(h.setIdx.watchers) != 0 {
		t.Errorf("%d watches left after Close", len(h.setIdx.watchers))
	}
}

// TestSetAdopt: a pinned program that classifies by sets is adopted after
// a "restart": its set map is brought up to date with the combinations
// formed and gone meanwhile, and it follows changes from then on.
func TestSetAdopt(t *testing.T) {
	h := newHarness(t)
	res := resolver{"s0": 600, "s1": 601, "s2": 602}
	h.addMember(600, netip.MustParsePrefix("10.7.0.1/32"), 0, 0)
	h.addMember(601, netip.MustParsePrefix("10.7.0.2/32"), 0, 0)
	h.addMember(602, netip.MustParsePrefix("10.7.0.3/32"), 0, 0)
	p := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p",
		model.Rule{Action: model.ActionDeny, SrcIPSets: []string{"s0"}},
		model.Rule{Action: model.ActionAllow, SrcIPSets: []string{"s1"}},
		model.Rule{Action: model.ActionAllow, SrcIPSets: []string{"s2"}},
	))}}
	spec, err := Compile(&p, model.Egress, res, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.index.sets) == 0 {
		t.Fatal("not classified by sets")
	}
	prog, dir := loadPinned(t, h, spec)
	pinnedHash, err := prog.own.setw.inner().Clone()
	if err != nil {
		t.Fatal(err)
	}
	defer pinnedHash.Close()
	prog.Abandon()
	// Meanwhile: a new combination {s0, s2}, and {s2} alone goes.
	h.addMember(602, netip.MustParsePrefix("10.7.0.1/32"), 0, 0)
	h.removeMember(602, netip.MustParsePrefix("10.7.0.3/32"))
	h.addMember(601, netip.MustParsePrefix("10.7.0.9/32"), 0, 0)

	pinned, err := OpenPinned(dir, h.maps.Chain)
	if err != nil {
		t.Fatal(err)
	}
	// Another policy does not adopt it, and leaves its set hash alone.
	entries := func() string {
		var k uint32
		var v []byte
		out := map[uint32]string{}
		it := pinnedHash.Iterate()
		for it.Next(&k, &v) {
			out[k] = fmt.Sprintf("%x", v)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(out)
	}
	was := entries()
	other := p
	other.Tiers = []model.Tier{tier("t", deny, pol("p", append(slices.Clone(p.Tiers[0].Policies[0].Rules),
		model.Rule{Action: model.ActionDeny, SrcIPSets: []string{"s1"}})...))}
	otherSpec, err := Compile(&other, model.Egress, res, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otherSpec.Adopt(h.maps, pinned); err == nil {
		t.Fatal("adopted the pinned program of another policy")
	}
	if entries() != was {
		t.Error("a refused adoption rewrote the pinned program's set hash")
	}
	spec2, err := Compile(&p, model.Egress, res, Options{})
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := spec2.Adopt(h.maps, pinned)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	t.Cleanup(func() { _ = adopted.Close() })
	expect := func(step, src string, want uint32) {
		t.Helper()
		if ret, _ := h.run(adopted, tcp(src, "10.9.9.9", 1, 2)); ret != want {
			t.Errorf("%s: %s: %d, want %d", step, src, ret, want)
		}
	}
	expect("adopted", "10.7.0.1", retDeny)
	expect("adopted", "10.7.0.2", retAllow)
	expect("adopted", "10.7.0.9", retAllow)
	expect("adopted", "10.7.0.3", retDeny)
	var k uint32
	var v []byte
	it := adopted.own.setw.inner().Iterate()
	for it.Next(&k, &v) {
		if id := k >> 1; id != 0 && h.setIdx.combos[id] == nil {
			t.Errorf("entry of combination %d, which is gone", id)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	h.addMember(602, netip.MustParsePrefix("10.7.0.4/32"), 0, 0)
	expect("after adoption", "10.7.0.4", retAllow)
	if err := adopted.Unpin(); err != nil {
		t.Fatal(err)
	}
}

// TestSetHashGrows: a program whose sets form more combinations than its
// first set hash holds gets a bigger one, through the same program.
func TestSetHashGrows(t *testing.T) {
	h := newHarness(t)
	res := resolver{"s0": 600, "s1": 601}
	h.addMember(601, netip.MustParsePrefix("10.6.0.1/32"), 0, 0)
	p := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p",
		model.Rule{Action: model.ActionDeny, SrcIPSets: []string{"s1"}},
		model.Rule{Action: model.ActionAllow, SrcIPSets: []string{"s0"}},
	))}}
	prog := h.load(&p, res, Options{})
	head := prog.HeadID()
	const n = 3 * setsInitial
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 8, byte(i >> 8), byte(i)}) }
	h.bulk = true
	for i := range n { // {s0, other i}: a combination of its own each
		h.addMember(600, netip.PrefixFrom(addr(i), 32), 0, 0)
		h.addMember(uint32(700+i), netip.PrefixFrom(addr(i), 32), 0, 0)
	}
	h.bulk = false
	h.rebuildIndex()
	if got := prog.own.setw.inner().MaxEntries(); got < n {
		t.Errorf("set hash holds %d entries, %d combinations need more", got, n)
	}
	if prog.HeadID() != head {
		t.Error("the program was replaced")
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if ret, _ := h.run(prog, tcp(addr(i).String(), "10.9.9.9", 1, 2)); ret != retAllow {
			t.Errorf("source in s0 and set %d: %d, want allow", 700+i, ret)
		}
	}
	if ret, _ := h.run(prog, tcp("10.6.0.1", "10.9.9.9", 1, 2)); ret != retDeny {
		t.Errorf("source in s1: %d, want deny", ret)
	}
}
