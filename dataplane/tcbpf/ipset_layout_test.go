package tcbpf

import (
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// clearFamilies rewrites every key of the pinned map name with a zero
// family byte at off: the layout of an earlier dpd.
func clearFamilies(t *testing.T, pinDir, name string, off int) int {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), nil)
	mustNil(t, err)
	defer m.Close()
	info, err := m.Info()
	mustNil(t, err)
	var keys [][]byte
	var vals [][]byte
	k, v := make([]byte, info.KeySize), make([]byte, info.ValueSize)
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys, vals = append(keys, append([]byte(nil), k...)), append(vals, append([]byte(nil), v...))
	}
	mustNil(t, it.Err())
	for i, k := range keys {
		mustNil(t, m.Delete(k))
		k[off] = 0
		mustNil(t, m.Update(k, vals[i], ebpf.UpdateAny))
	}
	return len(keys)
}

// TestIPSetFamilies: members of both families live in one set, keyed by
// family, and a lookup of one family never finds a member of the other,
// even when their bytes agree.
func TestIPSetFamilies(t *testing.T) {
	d := openTest(t, Options{PinDir: testPinDir(t)})
	mustNil(t, d.ReplaceIPSet("s:mixed", model.IPSetNet, members("a01:203::/32", "10.9.0.0/16", "fd00::/16")))
	id, _ := d.SetID("s:mixed")
	in := func(addr string) bool {
		a := netip.MustParseAddr(addr)
		k, err := memberKey(id, model.IPSetMember{Prefix: netip.PrefixFrom(a, a.BitLen())})
		mustNil(t, err)
		var v uint32
		return d.Maps().IPSets.Lookup(&k, &v) == nil
	}
	for addr, want := range map[string]bool{
		"10.1.2.3": false, "a01:203::1": true, // same leading bytes, other family
		"10.9.1.1": true, "a09::1": false, "fd00::1": true, "253.0.0.1": false,
	} {
		if got := in(addr); got != want {
			t.Errorf("%s in set: %v, want %v", addr, got, want)
		}
	}
	// A delta of one family leaves the other alone.
	mustNil(t, d.UpdateIPSet("s:mixed", members("10.1.2.3/32"), members("a01:203::/32")))
	if !in("10.1.2.3") || in("a01:203::1") || !in("fd00::1") {
		t.Errorf("after the delta: 10.1.2.3 %v, a01:203::1 %v, fd00::1 %v", in("10.1.2.3"), in("a01:203::1"), in("fd00::1"))
	}
	if n := countMembers(t, d); n != 3 {
		t.Errorf("%d members, want 3", n)
	}
}

// TestIPSetFamilylessPins: set maps pinned by a dpd whose keys had no
// family are detected and replaced, not misread; the ids survive and the
// next replace rewrites the members.
func TestIPSetFamilylessPins(t *testing.T) {
	pinDir := testPinDir(t)
	d := openTest(t, Options{PinDir: pinDir})
	mustNil(t, d.ReplaceIPSet("s:a", model.IPSetNet, members("10.1.2.3/32", "10.2.0.0/16")))
	mustNil(t, d.ReplaceIPSet("s:b", model.IPSetNet, members("10.1.2.0/24")))
	id, _ := d.SetID("s:a")
	mustNil(t, d.Close())
	if n := clearFamilies(t, pinDir, abi.MapIPSets, abi.IPSetKeyFamily); n != 3 {
		t.Fatalf("%d pinned members, want 3", n)
	}
	if n := clearFamilies(t, pinDir, abi.MapIPSetIdx, abi.IPSetIdxKeyFamily); n == 0 {
		t.Fatal("no pinned index entries")
	}

	d = openTest(t, Options{PinDir: pinDir})
	if r, ok := migrationOf(d, abi.MapIPSets); !ok || r.Replaced || r.Reason == "" {
		t.Errorf("familyless dpd_ipsets: %+v %v, want reported and replaced empty", r, ok)
	}
	if got, ok := d.SetID("s:a"); !ok || got != id {
		t.Errorf("s:a id %d %v after the replacement, want %d", got, ok, id)
	}
	if n := countMembers(t, d); n != 0 {
		t.Errorf("%d members carried over from the familyless map", n)
	}
	if old, err := familyLess(d.IPSetIndex(), abi.IPSetIdxKeyFamily); err != nil || old {
		t.Errorf("index still familyless (%v)", err)
	}
	mustNil(t, d.ReplaceIPSet("s:a", model.IPSetNet, members("10.1.2.3/32", "10.2.0.0/16")))
	if !inSet(t, d, id, "10.1.2.3") {
		t.Error("member not rewritten after the replacement")
	}
	if v := idxSets(t, d, netip.MustParseAddr("10.1.2.3")); !slices.Contains(v, id) {
		t.Errorf("index sets of 10.1.2.3: %v", v)
	}
}
