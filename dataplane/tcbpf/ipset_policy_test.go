package tcbpf

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// TestPolicyOverManySets: a compiled policy over far more sets than a
// bitmap of set ids could hold decides through the Datapath's index, and
// follows set deltas (new combinations of sets included) without a
// reload; its watch ends with it.
func TestPolicyOverManySets(t *testing.T) {
	d := openTest(t, Options{PinDir: testPinDir(t),
		Sizes: MapSizes{Conntrack: 1024, IPSets: 8192, IfState: 64, RuleCounters: 4096, Chain: 64, Fragments: 128}})
	ifA, _ := vethPair(t)
	const n = 700
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 5, byte(i >> 8), byte(i)}) }
	var rules []model.Rule
	for i := range n {
		name := fmt.Sprintf("s:%d", i)
		mustNil(t, d.ReplaceIPSet(name, model.IPSetNet, members(netip.PrefixFrom(addr(i), 32).String(), fmt.Sprintf("fd05::%x/128", i))))
		act := model.ActionDeny
		if i%2 == 1 {
			act = model.ActionAllow
		}
		rules = append(rules, model.Rule{Action: act, SrcIPSets: []string{name}})
	}
	pol := model.DirectionPolicy{Tiers: []model.Tier{{Name: "t", DefaultAction: model.ActionDeny,
		Policies: []model.PolicyRules{{Name: "t/p", Kind: "policy", Rules: rules}}}}}
	spec, err := polprog.Compile(&pol, model.Egress, d, polprog.Options{})
	mustNil(t, err)
	m := d.Maps()
	prog, err := spec.Load(polprog.Maps{State: m.State, Jump: m.Jump, IPSets: m.IPSets, RuleCtrs: m.RuleCtrs,
		Chain: m.Chain, IPSetIdx: d.IPSetIndex(), SetIndex: d, IPSetIdxHash: d.IPSetIndexHash()})
	mustNil(t, err)
	defer func() { _ = prog.Close() }()
	d.mu.Lock()
	watches := len(d.setIdx.combos.watches)
	d.mu.Unlock()
	if watches != 1 {
		t.Fatalf("%d watches of the set combinations, want the program's", watches)
	}
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, prog.Head()))
	port := uint16(1000)
	verdict := func(src netip.Addr) int {
		port++ // a new flow each time: conntrack must not answer
		return run(t, d, abi.DirFromWEP, ifA, udpPkt(src, netip.MustParseAddr("10.99.0.1"), port, 53))
	}
	for _, i := range []int{0, 1, 2, 511, 512, 513, n - 2, n - 1} {
		want := abi.TCActShot
		if i%2 == 1 {
			want = abi.TCActOK
		}
		if got := verdict(addr(i)); got != want {
			t.Errorf("source in set %d: verdict %d, want %d", i, got, want)
		}
	}
	if got := verdict(netip.MustParseAddr("10.6.0.1")); got != abi.TCActShot {
		t.Errorf("source in no set: verdict %d, want drop", got)
	}
	// addr(n-1) joins set 0 too: the new combination {0, n-1} decides
	// by rule 0, which comes first.
	mustNil(t, d.UpdateIPSet("s:0", members(netip.PrefixFrom(addr(n-1), 32).String()), nil))
	if got := verdict(addr(n - 1)); got != abi.TCActShot {
		t.Errorf("in sets 0 and %d: verdict %d, want drop", n-1, got)
	}
	mustNil(t, d.UpdateIPSet("s:0", nil, members(netip.PrefixFrom(addr(n-1), 32).String())))
	if got := verdict(addr(n - 1)); got != abi.TCActOK {
		t.Errorf("back in set %d only: verdict %d, want pass", n-1, got)
	}
	// A covering prefix added to an allowing set reaches an address in no set.
	mustNil(t, d.UpdateIPSet("s:3", members("10.6.0.0/16"), nil))
	if got := verdict(netip.MustParseAddr("10.6.0.1")); got != abi.TCActOK {
		t.Errorf("in set 3 by a /16: verdict %d, want pass", got)
	}
	mustNil(t, d.RemoveIPSet("s:3"))
	if got := verdict(netip.MustParseAddr("10.6.0.1")); got != abi.TCActShot {
		t.Errorf("set 3 removed: verdict %d, want drop", got)
	}
	mustNil(t, d.ClearPolicy(1, abi.DirFromWEP))
	mustNil(t, prog.Close())
	d.mu.Lock()
	watches = len(d.setIdx.combos.watches)
	d.mu.Unlock()
	if watches != 0 {
		t.Errorf("%d watches after the program closed", watches)
	}
}

// TestComboIDsSurviveRestart: a reopened Datapath maps every prefix to
// the combination id it had, so the set maps of programs still attached
// stay right; combinations are released once nothing maps to them.
func TestComboIDsSurviveRestart(t *testing.T) {
	pinDir := testPinDir(t)
	d := openTest(t, Options{PinDir: pinDir})
	mustNil(t, d.ReplaceIPSet("s:a", model.IPSetNet, members("10.0.0.0/8", "10.1.0.0/16", "fd00::/16")))
	mustNil(t, d.ReplaceIPSet("s:b", model.IPSetNet, members("10.1.2.0/24", "10.3.0.0/16", "10.3.0.7/32")))
	mustNil(t, d.ReplaceIPSet("s:c", model.IPSetNet, members("10.1.2.3/32")))
	mustNil(t, d.RemoveIPSet("s:c")) // its combinations go
	read := func(d *Datapath) map[idxKey]idxVal {
		out := map[idxKey]idxVal{}
		mustNil(t, readAll(d.IPSetIndex(), func(k idxKey, v idxVal) { out[k] = v }))
		mustNil(t, readAll(d.IPSetIndexHash(), func(k idxKey, v idxVal) { out[k] = v }))
		return out
	}
	before := read(d)
	d.mu.Lock()
	combos := len(d.setIdx.combos.byID)
	d.mu.Unlock()
	// 10/8 {a}, 10.1/16 {a}, fd00::/16 {a}, 10.1.2/24 {a,b}, 10.3/16 {a,b},
	// 10.3.0.7 {a,b} (in the hash): two combinations.
	if len(before) != 6 || combos != 2 {
		t.Fatalf("%d entries, %d combinations; want 6 and 2", len(before), combos)
	}
	mustNil(t, d.Close())
	d = openTest(t, Options{PinDir: pinDir})
	if after := read(d); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("entries after a restart %v, before %v", after, before)
	}
}
