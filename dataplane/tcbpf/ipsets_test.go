package tcbpf

import (
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func members(prefixes ...string) []model.IPSetMember {
	var out []model.IPSetMember
	for _, p := range prefixes {
		out = append(out, model.IPSetMember{Prefix: netip.MustParsePrefix(p)})
	}
	return out
}

// inSet asks the LPM trie the way a policy program does: the full-length
// key of addr in set id.
func inSet(t *testing.T, d *Datapath, id uint32, addr string) bool {
	t.Helper()
	k, err := memberKey(id, model.IPSetMember{Prefix: netip.PrefixFrom(netip.MustParseAddr(addr), 32)})
	if err != nil {
		t.Fatal(err)
	}
	var v uint32
	return d.Maps().IPSets.Lookup(&k, &v) == nil
}

func countMembers(tb testing.TB, d *Datapath) int {
	tb.Helper()
	var k ipsetKey
	var v uint32
	n := 0
	it := d.Maps().IPSets.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	mustNil(tb, it.Err())
	return n
}

func TestIPSets(t *testing.T) {
	pinDir := testPinDir(t)
	d := openTest(t, Options{PinDir: pinDir})

	mustNil(t, d.ReplaceIPSet("s:a", model.IPSetNet, members("10.0.0.0/8", "192.168.1.1/32")))
	mustNil(t, d.ReplaceIPSet("s:b", model.IPSetIP, members("10.1.1.1/32")))
	idA, okA := d.SetID("s:a")
	idB, okB := d.SetID("s:b")
	if !okA || !okB || idA == 0 || idB == 0 || idA == idB {
		t.Fatalf("ids %d %v, %d %v", idA, okA, idB, okB)
	}
	checks := func(want map[string]bool, id uint32) {
		t.Helper()
		for addr, in := range want {
			if got := inSet(t, d, id, addr); got != in {
				t.Errorf("set %d contains %s: %v, want %v", id, addr, got, in)
			}
		}
	}
	checks(map[string]bool{"10.9.9.9": true, "192.168.1.1": true, "192.168.1.2": false}, idA)
	checks(map[string]bool{"10.1.1.1": true, "10.9.9.9": false}, idB)

	// Replace writes the difference; update applies deltas.
	mustNil(t, d.ReplaceIPSet("s:a", model.IPSetNet, members("192.168.1.1/32", "172.16.0.0/12")))
	checks(map[string]bool{"10.9.9.9": false, "172.20.0.1": true, "192.168.1.1": true}, idA)
	mustNil(t, d.UpdateIPSet("s:a", members("10.0.0.0/8"), members("172.16.0.0/12", "1.1.1.1/32")))
	checks(map[string]bool{"10.9.9.9": true, "172.20.0.1": false}, idA)
	if err := d.UpdateIPSet("s:nope", members("1.1.1.1/32"), nil); err == nil {
		t.Fatal("update of an unknown set succeeded")
	}
	if n := countMembers(t, d); n != 3 {
		t.Fatalf("%d members in the trie, want 3", n)
	}

	// A restart keeps ids and members, and replace after it is a no-op diff.
	mustNil(t, d.Close())
	d2 := openTest(t, Options{PinDir: pinDir})
	if id, ok := d2.SetID("s:a"); !ok || id != idA {
		t.Fatalf("after restart s:a has id %d %v, want %d", id, ok, idA)
	}
	d = d2
	checks(map[string]bool{"10.9.9.9": true, "192.168.1.1": true}, idA)
	mustNil(t, d.ReplaceIPSet("s:a", model.IPSetNet, members("10.0.0.0/8", "192.168.1.1/32")))
	mustNil(t, d.ReplaceIPSet("s:c", model.IPSetIPAndPort,
		[]model.IPSetMember{{Prefix: netip.MustParsePrefix("10.2.2.2/32"), Proto: 6, Port: 80}}))
	if idC, _ := d.SetID("s:c"); idC == idA || idC == idB {
		t.Fatalf("s:c reused a live id %d", idC)
	}

	// Garbage collection of sets nobody re-sent, then removal.
	if n, err := d.RetainIPSets([]string{"s:a", "s:c"}); err != nil || n != 1 {
		t.Fatalf("retain removed %d %v, want 1 (s:b)", n, err)
	}
	if _, ok := d.SetID("s:b"); ok {
		t.Fatal("s:b survived retain")
	}
	checks(map[string]bool{"10.1.1.1": false}, idB)
	mustNil(t, d.RemoveIPSet("s:a"))
	mustNil(t, d.RemoveIPSet("s:c"))
	mustNil(t, d.RemoveIPSet("s:never"))
	if n := countMembers(t, d); n != 0 {
		t.Fatalf("%d members left after removing every set", n)
	}
	// Freed ids are reused.
	mustNil(t, d.ReplaceIPSet("s:d", model.IPSetIP, nil))
	if id, _ := d.SetID("s:d"); id != 1 {
		t.Fatalf("first free id %d, want 1", id)
	}
}
