package tcbpf

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// idxSets asks dpd_ipset_idx the way a compiled policy does, and returns
// the sets of the combination it answers.
func idxSets(t *testing.T, d *Datapath, a netip.Addr) []uint32 {
	t.Helper()
	k := make([]byte, abi.IPSetIdxKeySize)
	binary.NativeEndian.PutUint32(k, uint32(abi.IPSetIdxKeyFixedBits+a.BitLen()))
	k[abi.IPSetIdxKeyFamily] = addrFamily(a)
	copy(k[abi.IPSetIdxKeyAddr:], a.AsSlice())
	var v idxVal
	if err := d.IPSetIndexHash().Lookup(k, &v); err != nil {
		if err := d.IPSetIndex().Lookup(k, &v); err != nil {
			return nil
		}
	}
	c := d.setIdx.combos.byID[v]
	if c == nil {
		t.Fatalf("%s maps to combination %d, which does not exist", a, v)
	}
	return c.sets
}

// TestIPSetIndex changes random sets at random and checks, for a pool of
// addresses, that the index answers exactly what one dpd_ipsets lookup per
// set answers; then that a reopened Datapath rebuilds the same index.
func TestIPSetIndex(t *testing.T) {
	pinDir := testPinDir(t)
	d := openTest(t, Options{PinDir: pinDir})
	rng := rand.New(rand.NewPCG(1, 2))
	pool := []string{"10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3/32", "10.1.2.4/32", "10.9.9.9/32",
		"192.168.0.0/16", "192.168.1.1/32", "0.0.0.0/0", "fd00::/16", "fd00::1/128", "fd00::2/128",
		"a01:203::/32", "a00::/8", "::/0"} // IPv6 prefixes whose bytes start like 10.1.2.3 and 10/8
	addrs := []string{"10.1.2.3", "10.1.2.4", "10.1.2.5", "10.9.9.9", "10.200.0.1", "192.168.1.1", "8.8.8.8",
		"fd00::1", "fd00::2", "fd01::1", "a01:203::1", "a01:204::"}
	names := []string{"s:a", "s:b", "s:c", "s:d", "s:e"}
	check := func(step string) {
		t.Helper()
		for _, as := range addrs {
			a := netip.MustParseAddr(as)
			got := idxSets(t, d, a)
			var want []uint32
			for _, n := range names {
				id, ok := d.SetID(n)
				if !ok {
					continue
				}
				k, err := memberKey(id, model.IPSetMember{Prefix: netip.PrefixFrom(a, a.BitLen())})
				mustNil(t, err)
				var v uint32
				if d.Maps().IPSets.Lookup(&k, &v) == nil {
					want = append(want, id)
				}
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s in sets %v, dpd_ipsets says %v", step, as, got, want)
			}
		}
	}
	for step := range 60 {
		n := names[rng.IntN(len(names))]
		var ms []string
		for range rng.IntN(4) {
			ms = append(ms, pool[rng.IntN(len(pool))])
		}
		switch rng.IntN(4) {
		case 0:
			mustNil(t, d.RemoveIPSet(n))
		case 1:
			if _, ok := d.SetID(n); ok {
				mustNil(t, d.UpdateIPSet(n, members(ms[:len(ms)/2]...), members(ms[len(ms)/2:]...)))
				break
			}
			fallthrough
		default:
			mustNil(t, d.ReplaceIPSet(n, model.IPSetNet, members(ms...)))
		}
		check(fmt.Sprintf("step %d", step))
	}
	mustNil(t, d.Close())
	d = openTest(t, Options{PinDir: pinDir})
	check("reopened")
}

// TestIPSetIndexSpill: full-length entries beyond the hash's room go to
// the trie, which answers for them; removal clears both maps, and a
// reopen keeps the answers.
func TestIPSetIndexSpill(t *testing.T) {
	pinDir := testPinDir(t)
	opts := Options{PinDir: pinDir, Sizes: MapSizes{Conntrack: 1024, IPSets: 8192, IfState: 64, RuleCounters: 256, Chain: 64}}
	d := openTest(t, opts)
	room := int(exactEntries(8192))
	n := room + room/2
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 5, byte(i >> 8), byte(i)}) }
	var ms []model.IPSetMember
	for i := range n {
		ms = append(ms, model.IPSetMember{Prefix: netip.PrefixFrom(addr(i), 32)})
	}
	mustNil(t, d.ReplaceIPSet("s:a", model.IPSetIP, ms))
	mustNil(t, d.ReplaceIPSet("s:b", model.IPSetNet, members("10.5.0.0/16")))
	a, _ := d.SetID("s:a")
	b, _ := d.SetID("s:b")
	check := func(step string, want []uint32) {
		t.Helper()
		for _, i := range []int{0, room - 1, room, n - 1} {
			if got := idxSets(t, d, addr(i)); !slices.Equal(got, want) {
				t.Errorf("%s: %s in sets %v, want %v", step, addr(i), got, want)
			}
		}
	}
	both := []uint32{min(a, b), max(a, b)}
	check("spilled", both)
	mustNil(t, d.Close())
	d = openTest(t, opts)
	check("reopened", both)
	mustNil(t, d.RemoveIPSet("s:a"))
	check("s:a removed", []uint32{b})
	var k idxKey
	var v idxVal
	left := 0
	for _, m := range []*ebpf.Map{d.IPSetIndex(), d.IPSetIndexHash()} {
		it := m.Iterate()
		for it.Next(&k, &v) {
			left++
		}
		mustNil(t, it.Err())
	}
	if left != 1 {
		t.Errorf("%d index entries left, want the /16's", left)
	}
}
