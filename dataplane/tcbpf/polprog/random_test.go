package polprog

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// refMember is one IP set member for the reference evaluator.
type refMember struct {
	pfx   netip.Prefix
	proto uint8
	port  uint16
}

// refSets are the sets of the differential test, by name; ids come from randSetIDs.
var refSets = map[string][]refMember{
	"a":   {{pfx: netip.MustParsePrefix("10.0.0.0/30")}},
	"b":   {{pfx: netip.MustParsePrefix("10.0.0.2/31")}, {pfx: netip.MustParsePrefix("fd00::5/128")}},
	"c":   {{pfx: netip.MustParsePrefix("192.168.0.0/16")}},
	"np":  {{netip.MustParsePrefix("10.0.0.2/32"), 6, 80}, {netip.MustParsePrefix("10.0.0.5/32"), 17, 53}, {netip.MustParsePrefix("fd00::5/128"), 17, 53}},
	"np2": {{netip.MustParsePrefix("10.0.0.1/32"), 6, 443}, {netip.MustParsePrefix("fd00::1/128"), 6, 443}},
	// Members whose bytes collide across families: a00::/16 starts like
	// 10.0.0.0/16, and the packet a00:1:: starts like 10.0.0.1 (see randPkt).
	"d": {{pfx: netip.MustParsePrefix("a00::/16")}, {pfx: netip.MustParsePrefix("192.168.0.1/32")}},
	"e": {{pfx: netip.MustParsePrefix("fd00::100/120")}, {pfx: netip.MustParsePrefix("10.0.0.1/32")}},
}

// randSetIDs: "d" and "e" have ids past the index's slots.
var randSetIDs = resolver{"a": 101, "b": 102, "c": 103, "np": 104, "np2": 105, "d": 700, "e": 1300}

func refIn(set string, a netip.Addr, proto uint8, port uint16) bool {
	for _, m := range refSets[set] {
		if m.pfx.Contains(a) && m.proto == proto && m.port == port {
			return true
		}
	}
	return false
}

// refMatch is the Rule doc comment, written as plainly as possible.
func refMatch(r *model.Rule, p pkt) bool {
	v4 := p.src.Is4()
	isICMP := (v4 && p.proto == 1) || (!v4 && p.proto == 58)
	hasPorts := slices.Contains(portProtos, p.proto)
	if (r.IPVersion == 4 && !v4) || (r.IPVersion == 6 && v4) || (r.IPVersion != 0 && r.IPVersion != 4 && r.IPVersion != 6) {
		return false
	}
	// Calico renders a rule for a family only if that family leaves none
	// of its CIDR lists empty.
	ofFamily := func(l []netip.Prefix) bool {
		return len(l) == 0 || slices.ContainsFunc(l, func(n netip.Prefix) bool { return n.Addr().Is4() == v4 })
	}
	if !ofFamily(r.SrcNets) || !ofFamily(r.NotSrcNets) || !ofFamily(r.DstNets) || !ofFamily(r.NotDstNets) {
		return false
	}
	if (r.Protocol != nil && *r.Protocol != p.proto) || (r.NotProtocol != nil && *r.NotProtocol == p.proto) {
		return false
	}
	anyNet := func(l []netip.Prefix, a netip.Addr) bool {
		return slices.ContainsFunc(l, func(n netip.Prefix) bool { return n.Contains(a) })
	}
	if (len(r.SrcNets) > 0 && !anyNet(r.SrcNets, p.src)) || (len(r.DstNets) > 0 && !anyNet(r.DstNets, p.dst)) ||
		anyNet(r.NotSrcNets, p.src) || anyNet(r.NotDstNets, p.dst) {
		return false
	}
	portIn := func(ranges []model.PortRange, named []string, a netip.Addr, port uint16) bool {
		for _, pr := range ranges {
			if port >= pr.First && port <= pr.Last {
				return true
			}
		}
		return slices.ContainsFunc(named, func(s string) bool { return refIn(s, a, p.proto, port) })
	}
	side := func(ranges, notRanges []model.PortRange, named, notNamed []string, a netip.Addr, port uint16) bool {
		if len(ranges)+len(named) > 0 && (!hasPorts || !portIn(ranges, named, a, port)) {
			return false
		}
		if len(notRanges)+len(notNamed) > 0 && (!hasPorts || portIn(notRanges, notNamed, a, port)) {
			return false
		}
		return true
	}
	if !side(r.SrcPorts, r.NotSrcPorts, r.SrcNamedPortSets, r.NotSrcNamedPortSets, p.src, p.sport) ||
		!side(r.DstPorts, r.NotDstPorts, r.DstNamedPortSets, r.NotDstNamedPortSets, p.dst, p.dport) {
		return false
	}
	for _, s := range r.SrcIPSets {
		if !refIn(s, p.src, 0, 0) {
			return false
		}
	}
	for _, s := range r.DstIPSets {
		if !refIn(s, p.dst, 0, 0) {
			return false
		}
	}
	if slices.ContainsFunc(r.NotSrcIPSets, func(s string) bool { return refIn(s, p.src, 0, 0) }) ||
		slices.ContainsFunc(r.NotDstIPSets, func(s string) bool { return refIn(s, p.dst, 0, 0) }) {
		return false
	}
	if len(r.DstIPPortSets) > 0 && !slices.ContainsFunc(r.DstIPPortSets, func(s string) bool { return refIn(s, p.dst, p.proto, p.dport) }) {
		return false
	}
	icmpIs := func(m *model.ICMPMatch) bool {
		return isICMP && p.icmpType == m.Type && (!m.HasCode || p.icmpCode == m.Code)
	}
	if (r.ICMP != nil && !icmpIs(r.ICMP)) || (r.NotICMP != nil && icmpIs(r.NotICMP)) {
		return false
	}
	return true
}

// refEval is Calico's evaluation order; it returns "+decider" or "decider".
func refEval(pol *model.DirectionPolicy, p pkt) string {
	decided := func(a model.Action, what string) string {
		if a == model.ActionAllow {
			return "+" + what
		}
		return what
	}
tiers:
	for _, t := range pol.Tiers {
		for _, pr := range t.Policies {
			for i := range pr.Rules {
				r := &pr.Rules[i]
				if !refMatch(r, p) || r.Action == model.ActionLog {
					continue
				}
				if r.Action == model.ActionPass {
					continue tiers
				}
				return decided(r.Action, fmt.Sprintf("%s#%d", pr.Name, i))
			}
		}
		if t.DefaultAction != model.ActionPass {
			return "default:" + t.Name
		}
	}
	for _, pr := range pol.Profiles {
		for i := range pr.Rules {
			r := &pr.Rules[i]
			if r.Action == model.ActionPass || r.Action == model.ActionLog || !refMatch(r, p) {
				continue
			}
			return decided(r.Action, fmt.Sprintf("%s#%d", pr.Name, i))
		}
	}
	return "no-match"
}

// randRule draws each match form with a small probability from small pools,
// so that rules match often enough to be interesting.
func randRule(rng *rand.Rand) model.Rule {
	pick := func(n int) bool { return rng.IntN(n) == 0 }
	protos := []string{"tcp", "udp", "icmp"}
	allNets := []string{"10.0.0.0/30", "10.0.0.4/31", "10.0.0.0/8", "192.168.0.0/16", "fd00::/120", "fd00::5/128"}
	someNets := func() []netip.Prefix {
		return nets(allNets[rng.IntN(len(allNets))], allNets[rng.IntN(len(allNets))])[:1+rng.IntN(2)]
	}
	somePorts := func() []model.PortRange {
		all := ports(80, 80, 443, 443, 50, 60, 1000, 2000)
		return all[rng.IntN(len(all)):][:1]
	}
	someSets := func(from ...string) []string { return []string{from[rng.IntN(len(from))]} }
	var r model.Rule
	actions := []model.Action{model.ActionAllow, model.ActionDeny, model.ActionPass, model.ActionLog}
	r.Action = actions[rng.IntN(len(actions))]
	if pick(8) {
		r.IPVersion = []uint8{4, 6}[rng.IntN(2)]
	}
	if pick(4) {
		r.Protocol = proto(protos[rng.IntN(3)])
	} else if pick(8) {
		r.NotProtocol = proto(protos[rng.IntN(3)])
	}
	if pick(5) {
		r.SrcNets = someNets()
	}
	if pick(5) {
		r.DstNets = someNets()
	}
	if pick(8) {
		r.NotSrcNets = someNets()
	}
	if pick(8) {
		r.NotDstNets = someNets()
	}
	if pick(5) {
		r.DstPorts = somePorts()
	}
	if pick(8) {
		r.SrcPorts = somePorts()
	}
	if pick(8) {
		r.NotDstPorts = somePorts()
	}
	if pick(6) {
		r.DstNamedPortSets = someSets("np", "np2")
	}
	if pick(10) {
		r.SrcNamedPortSets = someSets("np", "np2")
	}
	if pick(10) {
		r.NotDstNamedPortSets = someSets("np", "np2")
	}
	if pick(5) {
		r.SrcIPSets = []string{"a", "b", "c", "d", "e"}[rng.IntN(3):][:1+rng.IntN(2)]
	}
	if pick(5) {
		r.DstIPSets = someSets("a", "b", "c", "d", "e")
	}
	if pick(6) {
		r.NotSrcIPSets = someSets("a", "b", "c", "d")
	}
	if pick(8) {
		r.NotDstIPSets = someSets("a", "b", "e")
	}
	if pick(10) {
		r.DstIPPortSets = someSets("np", "np2")
	}
	if pick(8) {
		r.ICMP = &model.ICMPMatch{Type: uint8(rng.IntN(2) * 8), Code: uint8(rng.IntN(2)), HasCode: pick(2)}
	} else if pick(10) {
		r.NotICMP = &model.ICMPMatch{Type: 8, Code: 0, HasCode: pick(2)}
	}
	return r
}

func randPolicy(rng *rand.Rand) model.DirectionPolicy {
	return randShapedPolicy(rng, policyShape{tiers: 4, policyRules: 7, profileRules: 5, rule: randRule})
}

// policyShape bounds a random policy: minTiers plus up to tiers-1 more
// tiers of 1 to 3 policies with fewer than policyRules rules each, then up
// to 2 profiles of 1 to profileRules rules; rule draws each rule.
type policyShape struct {
	minTiers, tiers           int
	policyRules, profileRules int
	rule                      func(*rand.Rand) model.Rule
}

func randShapedPolicy(rng *rand.Rand, sh policyShape) model.DirectionPolicy {
	var p model.DirectionPolicy
	for t := range sh.minTiers + rng.IntN(sh.tiers) {
		tr := model.Tier{Name: fmt.Sprintf("t%d", t), DefaultAction: []model.Action{model.ActionDeny, model.ActionPass}[rng.IntN(2)]}
		for q := range 1 + rng.IntN(3) {
			pr := model.PolicyRules{Name: fmt.Sprintf("t%d/p%d", t, q), Kind: "policy"}
			for range rng.IntN(sh.policyRules) {
				pr.Rules = append(pr.Rules, sh.rule(rng))
			}
			tr.Policies = append(tr.Policies, pr)
		}
		p.Tiers = append(p.Tiers, tr)
	}
	for q := range rng.IntN(3) {
		pr := model.PolicyRules{Name: fmt.Sprintf("prof%d", q), Kind: "profile"}
		for range 1 + rng.IntN(sh.profileRules) {
			pr.Rules = append(pr.Rules, sh.rule(rng))
		}
		p.Profiles = append(p.Profiles, pr)
	}
	return p
}

func randPkt(rng *rand.Rand) pkt {
	v4 := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.5", "10.1.0.1", "192.168.0.1"}
	v6 := []string{"fd00::1", "fd00::5", "fd00::105", "a00:1::", "a00:2::", "a00::5"}
	pool := v4
	if rng.IntN(4) == 0 {
		pool = v6
	}
	src, dst := pool[rng.IntN(len(pool))], pool[rng.IntN(len(pool))]
	prts := []uint16{53, 55, 80, 443, 1500, 8080}
	switch rng.IntN(3) {
	case 0:
		return tcp(src, dst, prts[rng.IntN(len(prts))], prts[rng.IntN(len(prts))])
	case 1:
		return udp(src, dst, prts[rng.IntN(len(prts))], prts[rng.IntN(len(prts))])
	}
	return icmp(src, dst, uint8(rng.IntN(2)*8), uint8(rng.IntN(2)))
}

// diffConfigs are the strategies and chunk budgets every random policy is
// compiled with.
var diffConfigs = []Options{
	{}, {MaxChunkInsns: 150}, {MaxChunkInsns: 400},
	{Strategy: StrategyLinear, MaxChunkInsns: 400},
	{Strategy: StrategyIndexed}, {Strategy: StrategyIndexed, MaxChunkInsns: 150},
	{Strategy: StrategyIndexed, MaxChunkInsns: 400},
	{NoIPSetIndex: true}, {NoIPSetIndex: true, Strategy: StrategyIndexed, MaxChunkInsns: 150},
	{Strategy: StrategyIndexed, LinearHead: 3}, {Strategy: StrategyIndexed, LinearHead: 5, MaxChunkInsns: 150},
	{LinearHead: -1}, {LinearHead: 20, MaxChunkInsns: 400},
}

// TestDifferential compares the compiled program with refEval on random
// policies and packets, with every strategy and with and without chunking.
func TestDifferential(t *testing.T) {
	policies := 300
	if testing.Short() {
		policies = 60
	}
	rng := rand.New(rand.NewPCG(7, 11))
	differential(t, false, policies, 40, func() model.DirectionPolicy { return randPolicy(rng) }, func() pkt { return randPkt(rng) })
}

// TestDifferentialLarge does the same with policies of hundreds of rules
// over wider pools of ports, ranges and prefixes, so that the automatic
// strategy indexes them and matches happen deep in the rule list.
func TestDifferentialLarge(t *testing.T) {
	policies := 40
	if testing.Short() {
		policies = 10
	}
	rng := rand.New(rand.NewPCG(3, 5))
	differential(t, true, policies, 150, func() model.DirectionPolicy { return randLargePolicy(rng) }, func() pkt { return randLargePkt(rng) })
}

// TestDifferentialExact does the same with large policies of single ports
// and full-length prefixes, whose dimensions are classified by exact match.
func TestDifferentialExact(t *testing.T) {
	policies := 30
	if testing.Short() {
		policies = 8
	}
	rng := rand.New(rand.NewPCG(13, 17))
	differential(t, true, policies, 150, func() model.DirectionPolicy { return randExactPolicy(rng) }, func() pkt { return randLargePkt(rng) })
}

func differential(t *testing.T, wantChained bool, policies, packets int, newPol func() model.DirectionPolicy, newPkt func() pkt) {
	h := newHarness(t)
	h.bulk = true
	for name, members := range refSets {
		for _, m := range members {
			h.addMember(randSetIDs[name], m.pfx, m.proto, m.port)
		}
	}
	h.bulk = false
	h.rebuildIndex()
	mismatches, indexed, chained, hashed, bySets := 0, 0, 0, 0, 0
	for i := range policies {
		pol := newPol()
		opts := diffConfigs[i%len(diffConfigs)]
		spec, err := Compile(&pol, model.Egress, randSetIDs, opts)
		if err != nil {
			t.Fatalf("policy %d: compile: %v", i, err)
		}
		prog, err := spec.Load(h.maps)
		if err != nil {
			t.Fatalf("policy %d (%+v, %d chunks): load: %v", i, opts, spec.NumChunks(), err)
		}
		if spec.index != nil {
			indexed++
			if spec.index.hash {
				hashed++
			}
			if len(spec.index.sets) > 0 {
				bySets++
			}
			if spec.NumChunks() > 1 {
				chained++
			}
		}
		for range packets {
			p := newPkt()
			ret, res := h.run(prog, p)
			got := ruleName(prog.Rules(), res.RuleID)
			switch ret {
			case retAllow:
				got = "+" + got
			case retDeny:
			default:
				got = fmt.Sprintf("ret %d", ret)
			}
			if want := refEval(&pol, p); got != want {
				mismatches++
				if mismatches <= 5 {
					t.Errorf("policy %d (%+v, %d chunks, indexed %v) %+v\npacket %+v: got %s, want %s",
						i, opts, spec.NumChunks(), spec.index != nil, pol, p, got, want)
				}
			}
		}
		if err := prog.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if mismatches > 0 {
		t.Errorf("%d mismatches", mismatches)
	}
	t.Logf("%d policies: %d indexed, %d of them chained, %d with exact-match dimensions, %d classified by sets",
		policies, indexed, chained, hashed, bySets)
	if indexed == 0 || (chained == 0 && wantChained) || bySets == 0 {
		t.Errorf("the indexed strategy was not exercised (with chunks, by sets)")
	}
	if n := chainInUse(h.maps.Chain); n != 0 {
		t.Errorf("%d chain indices still allocated after closing every program", n)
	}
}
