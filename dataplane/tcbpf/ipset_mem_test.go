package tcbpf

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// The cold-start load (P3): 100 sets of 1,000 members.
const (
	memSets       = 100
	memSetMembers = 1000
)

// memSetMembersOf is set s of the cold start, in the order the engine
// sends members (sorted).
func memSetMembersOf(s int) []model.IPSetMember {
	out := make([]model.IPSetMember, 0, memSetMembers)
	for i := range memSetMembers {
		a := netip.AddrFrom4([4]byte{10, byte(s), byte(i / 250), byte(i%250 + 1)})
		out = append(out, model.IPSetMember{Prefix: netip.PrefixFrom(a, 32)})
	}
	return out
}

// ipsetHeapPerMember replaces the cold start's sets into a fresh Datapath
// and returns the heap it then holds per member after GC, and the heap a
// reopened Datapath holds after adopting the same pins.
func ipsetHeapPerMember(tb testing.TB) (replaced, reopened float64) {
	tb.Helper()
	pinDir := testPinDir(tb)
	opts := Options{PinDir: pinDir, Sizes: MapSizes{Conntrack: 1024, IPSets: 4 * memSets * memSetMembers,
		IfState: 64, RuleCounters: 256, Chain: 64}}
	const total = memSets * memSetMembers
	before := testutil.LiveHeap()
	d := openTest(tb, opts)
	for s := range memSets {
		mustNil(tb, d.ReplaceIPSet(memSetName(s), model.IPSetIP, memSetMembersOf(s)))
	}
	replaced = float64(int64(testutil.LiveHeap())-int64(before)) / total
	// openTest's cleanup keeps d reachable: the delta below is d2's alone.
	mustNil(tb, d.Close())
	before = testutil.LiveHeap()
	d2 := openTest(tb, opts)
	reopened = float64(int64(testutil.LiveHeap())-int64(before)) / total
	if n := countMembers(tb, d2); n != total {
		tb.Fatalf("%d members in dpd_ipsets after reopen, want %d", n, total)
	}
	runtime.KeepAlive(d2)
	return replaced, reopened
}

func memSetName(s int) string { return "s:" + string(rune('a'+s/26)) + string(rune('a'+s%26)) }

// TestIPSetMemoryPerMember bounds the heap the BPF layer keeps per IP set
// member, with real maps (three maps of keys cost ~300 bytes a member).
func TestIPSetMemoryPerMember(t *testing.T) {
	if testing.Short() {
		t.Skip("programs 100,000 members")
	}
	replaced, reopened := ipsetHeapPerMember(t)
	t.Logf("bpf: %.1f bytes per member after replace, %.1f after reopen", replaced, reopened)
	const limit = 64
	if replaced > limit || reopened > limit {
		t.Errorf("bpf layer holds %.1f (replace) / %.1f (reopen) bytes per member, want <= %d",
			replaced, reopened, limit)
	}
}

// BenchmarkIPSetMemory reports the heap held per member after programming
// 100 sets x 1,000 members, and after a reopen adopts them.
func BenchmarkIPSetMemory(b *testing.B) {
	var replaced, reopened float64
	for range b.N {
		replaced, reopened = ipsetHeapPerMember(b)
	}
	b.ReportMetric(replaced, "B/member")
	b.ReportMetric(reopened, "B/member-reopened")
}
