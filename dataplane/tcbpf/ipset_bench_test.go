package tcbpf

import (
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// BenchmarkIPSetColdStart programs the cold start's sets (P3: 100 sets of
// 1,000 members) into a fresh Datapath: dpd_ipsets and the index. The
// Datapath's opening is not timed.
func BenchmarkIPSetColdStart(b *testing.B) {
	opts := Options{Sizes: MapSizes{Conntrack: 1024, IPSets: 4 * memSets * memSetMembers, IfState: 64, RuleCounters: 256, Chain: 64}}
	sets := make([][]model.IPSetMember, memSets)
	for s := range sets {
		sets[s] = memSetMembersOf(s)
	}
	for b.Loop() {
		b.StopTimer()
		d := openTest(b, opts)
		b.StartTimer()
		for s := range memSets {
			mustNil(b, d.ReplaceIPSet(memSetName(s), model.IPSetIP, sets[s]))
		}
		b.StopTimer()
		mustNil(b, d.Close())
		b.StartTimer()
	}
}

// BenchmarkIPSetDelta adds and removes one member of one of the cold
// start's sets: the steady-state cost of a set delta.
func BenchmarkIPSetDelta(b *testing.B) {
	opts := Options{Sizes: MapSizes{Conntrack: 1024, IPSets: 4 * memSets * memSetMembers, IfState: 64, RuleCounters: 256, Chain: 64}}
	d := openTest(b, opts)
	for s := range memSets {
		mustNil(b, d.ReplaceIPSet(memSetName(s), model.IPSetIP, memSetMembersOf(s)))
	}
	m := []model.IPSetMember{{Prefix: netip.MustParsePrefix("10.200.0.1/32")}}
	for b.Loop() {
		mustNil(b, d.UpdateIPSet(memSetName(7), m, nil))
		mustNil(b, d.UpdateIPSet(memSetName(7), nil, m))
	}
}
