package polprog

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Pools of the large differential test: wide enough that most rules are
// specific, narrow enough that random packets hit them.
var (
	largeV4 = func() []string {
		var out []string
		for i := range 24 {
			out = append(out, fmt.Sprintf("10.%d.%d.%d", i%3, i%5, i))
		}
		return append(out, "192.168.0.1", "192.168.7.9", "172.16.0.1")
	}()
	largeV6   = []string{"fd00::1", "fd00::5", "fd00::105", "fd00:1::7", "2001:db8::1"}
	largeNets = []string{
		"10.0.0.0/8", "10.1.0.0/16", "10.2.4.0/24", "10.0.0.0/30", "10.1.1.0/28", "192.168.0.0/16",
		"0.0.0.0/0", "::/0", "fd00::/16", "fd00::/120", "fd00:1::/32", "2001:db8::1/128", "172.16.0.1/32",
	}
	largePorts = []uint16{0, 1, 22, 53, 79, 80, 81, 443, 1000, 1023, 1024, 5000, 8080, 32767, 32768, 65535}
)

func largeNet(rng *rand.Rand) netip.Prefix {
	if rng.IntN(3) == 0 {
		return netip.MustParsePrefix(largeNets[rng.IntN(len(largeNets))])
	}
	if rng.IntN(5) == 0 {
		return netip.PrefixFrom(netip.MustParseAddr(largeV6[rng.IntN(len(largeV6))]), 128)
	}
	return netip.PrefixFrom(netip.MustParseAddr(largeV4[rng.IntN(len(largeV4))]), 32)
}

func largeRange(rng *rand.Rand) model.PortRange {
	a, b := largePorts[rng.IntN(len(largePorts))], largePorts[rng.IntN(len(largePorts))]
	switch rng.IntN(4) {
	case 0:
		return model.PortRange{First: a, Last: a}
	case 1:
		return model.PortRange{First: max(a, b), Last: min(a, b)} // empty unless equal
	}
	return model.PortRange{First: min(a, b), Last: max(a, b)}
}

// randLargeRule is mostly port and address rules (the indexed dimensions),
// with the other match forms of randRule mixed in.
func randLargeRule(rng *rand.Rand) model.Rule {
	pick := func(n int) bool { return rng.IntN(n) == 0 }
	var r model.Rule
	if pick(4) {
		r = randRule(rng)
	} else {
		r.Action = []model.Action{model.ActionAllow, model.ActionDeny, model.ActionDeny, model.ActionPass, model.ActionLog}[rng.IntN(5)]
		if pick(3) {
			r.Protocol = proto([]string{"tcp", "udp", "icmp"}[rng.IntN(3)])
		}
	}
	ranges := func() []model.PortRange {
		out := []model.PortRange{largeRange(rng)}
		for pick(3) {
			out = append(out, largeRange(rng))
		}
		return out
	}
	nets := func() []netip.Prefix {
		out := []netip.Prefix{largeNet(rng)}
		for pick(3) {
			out = append(out, largeNet(rng))
		}
		return out
	}
	if pick(2) {
		r.DstPorts = append(r.DstPorts, ranges()...)
	}
	if pick(4) {
		r.SrcPorts = append(r.SrcPorts, ranges()...)
	}
	if pick(6) {
		r.NotDstPorts = append(r.NotDstPorts, ranges()...)
	}
	if pick(8) {
		r.NotSrcPorts = append(r.NotSrcPorts, ranges()...)
	}
	if pick(2) {
		r.SrcNets = append(r.SrcNets, nets()...)
	}
	if pick(3) {
		r.DstNets = append(r.DstNets, nets()...)
	}
	if pick(6) {
		r.NotSrcNets = append(r.NotSrcNets, nets()...)
	}
	if pick(6) {
		r.NotDstNets = append(r.NotDstNets, nets()...)
	}
	return r
}

func randLargePolicy(rng *rand.Rand) model.DirectionPolicy {
	return randShapedPolicy(rng, policyShape{minTiers: 1, tiers: 3, policyRules: 150, profileRules: 80, rule: randLargeRule})
}

func randLargePkt(rng *rand.Rand) pkt {
	if rng.IntN(3) == 0 {
		return randPkt(rng)
	}
	pool := largeV4
	if rng.IntN(5) == 0 {
		pool = largeV6
	}
	src, dst := pool[rng.IntN(len(pool))], pool[rng.IntN(len(pool))]
	port := func() uint16 {
		p := largePorts[rng.IntN(len(largePorts))]
		if rng.IntN(3) == 0 && p < 65535 {
			p++
		}
		return p
	}
	switch rng.IntN(4) {
	case 0, 1:
		return tcp(src, dst, port(), port())
	case 2:
		return udp(src, dst, port(), port())
	}
	return icmp(src, dst, uint8(rng.IntN(2)*8), 0)
}

// randExactRule is randLargeRule with single ports and full-length
// prefixes only, so the dimensions are classified by exact match
// (mapClsHash) rather than in the trie.
func randExactRule(rng *rand.Rand) model.Rule {
	r := randLargeRule(rng)
	for _, l := range []*[]model.PortRange{&r.DstPorts, &r.SrcPorts, &r.NotDstPorts, &r.NotSrcPorts} {
		for i := range *l {
			(*l)[i].Last = (*l)[i].First
		}
	}
	for _, l := range []*[]netip.Prefix{&r.SrcNets, &r.DstNets, &r.NotSrcNets, &r.NotDstNets} {
		for i, p := range *l {
			(*l)[i] = netip.PrefixFrom(p.Addr(), p.Addr().BitLen())
		}
	}
	return r
}

func randExactPolicy(rng *rand.Rand) model.DirectionPolicy {
	return randShapedPolicy(rng, policyShape{minTiers: 1, tiers: 3, policyRules: 150, profileRules: 80, rule: randExactRule})
}
