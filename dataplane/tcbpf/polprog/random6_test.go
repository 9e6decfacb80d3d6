package polprog

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// randDualRule draws rules for dual-stack policies: ip_version often set,
// CIDR lists of either family or both (negated ones too), ICMP and ICMPv6
// type/code matches with protocol 1 or 58, and IP sets with members of
// both families.
func randDualRule(rng *rand.Rand) model.Rule {
	pick := func(n int) bool { return rng.IntN(n) == 0 }
	v4Nets := []string{"10.0.0.0/30", "10.0.0.4/31", "10.0.0.0/8", "0.0.0.0/0", "10.0.0.5/32"}
	v6Nets := []string{"fd00::/120", "fd00::5/128", "fd00::/64", "::/0", "fd00::100/120", "fd00::1/128"}
	someNets := func() []netip.Prefix {
		var out []string
		switch rng.IntN(3) {
		case 0:
			out = []string{v4Nets[rng.IntN(len(v4Nets))]}
		case 1:
			out = []string{v6Nets[rng.IntN(len(v6Nets))]}
		default: // mixed, as "allow from 10.0.0.1, fd00::1" renders for both
			out = []string{v4Nets[rng.IntN(len(v4Nets))], v6Nets[rng.IntN(len(v6Nets))]}
		}
		return nets(out...)
	}
	icmpTypes := []uint8{0, 8, 3, 1, 2, 128, 129, 135}
	someICMP := func() *model.ICMPMatch {
		return &model.ICMPMatch{Type: icmpTypes[rng.IntN(len(icmpTypes))], Code: uint8(rng.IntN(2)), HasCode: pick(2)}
	}
	var r model.Rule
	actions := []model.Action{model.ActionAllow, model.ActionDeny, model.ActionPass, model.ActionLog}
	r.Action = actions[rng.IntN(len(actions))]
	if pick(3) {
		r.IPVersion = []uint8{4, 6}[rng.IntN(2)]
	}
	protos := []string{"tcp", "udp", "icmp", "icmpv6"}
	if pick(3) {
		r.Protocol = proto(protos[rng.IntN(len(protos))])
	} else if pick(8) {
		r.NotProtocol = proto(protos[rng.IntN(len(protos))])
	}
	if pick(4) {
		r.SrcNets = someNets()
	}
	if pick(4) {
		r.DstNets = someNets()
	}
	if pick(5) {
		r.NotSrcNets = someNets()
	}
	if pick(5) {
		r.NotDstNets = someNets()
	}
	if pick(5) {
		r.DstPorts = ports(443, 443, 50, 60)[rng.IntN(2):][:1]
	}
	if pick(8) {
		r.NotDstPorts = ports(80, 80, 1000, 2000)[rng.IntN(2):][:1]
	}
	if pick(8) {
		r.DstNamedPortSets = []string{"np2"}
	}
	if pick(6) {
		r.SrcIPSets = []string{"b"}
	}
	if pick(8) {
		r.NotDstIPSets = []string{"a", "b"}[rng.IntN(2):][:1]
	}
	if pick(4) {
		r.ICMP = someICMP()
	} else if pick(6) {
		r.NotICMP = someICMP()
	}
	return r
}

// randDualPkt draws IPv4 and IPv6 packets in equal parts, ICMP ones with
// their family's protocol and types of both.
func randDualPkt(rng *rand.Rand) pkt {
	pool := []string{"10.0.0.1", "10.0.0.2", "10.0.0.5", "10.1.0.1"}
	types := []uint8{0, 8, 3}
	if rng.IntN(2) == 0 {
		pool = []string{"fd00::1", "fd00::5", "fd00::105", "fd00::1:1", "fd01::1"}
		types = []uint8{128, 129, 1, 2, 135}
	}
	src, dst := pool[rng.IntN(len(pool))], pool[rng.IntN(len(pool))]
	prts := []uint16{53, 55, 80, 443, 1500}
	switch rng.IntN(3) {
	case 0:
		return tcp(src, dst, prts[rng.IntN(len(prts))], prts[rng.IntN(len(prts))])
	case 1:
		return udp(src, dst, prts[rng.IntN(len(prts))], prts[rng.IntN(len(prts))])
	}
	return icmp(src, dst, types[rng.IntN(len(types))], uint8(rng.IntN(2)))
}

// TestDifferentialDualStack compares the compiled program with refEval on
// dual-stack policies and packets of both families: ip_version, CIDR lists
// of one family or both and their negations (Calico's per-family
// rendering), ICMP and ICMPv6 matches.
func TestDifferentialDualStack(t *testing.T) {
	policies := 200
	if testing.Short() {
		policies = 50
	}
	rng := rand.New(rand.NewPCG(61, 67))
	differential(t, false, policies, 60, func() model.DirectionPolicy {
		return randShapedPolicy(rng, policyShape{tiers: 3, policyRules: 8, profileRules: 5, rule: randDualRule})
	}, func() pkt { return randDualPkt(rng) })
}

// TestFamilyOfNegatedNets pins the rendering rule the differential test
// checks at random: negated CIDRs of one family keep the rule from the
// other, mixed lists apply to both.
func TestFamilyOfNegatedNets(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name    string
		rule    model.Rule
		pkt     pkt
		matches bool
	}{
		{"not-v4 list, v4 packet outside", model.Rule{NotSrcNets: nets("10.0.0.0/8")}, tcp("192.168.0.1", "10.0.0.1", 1, 2), true},
		{"not-v4 list, v6 packet", model.Rule{NotSrcNets: nets("10.0.0.0/8")}, tcp("fd00::1", "fd00::2", 1, 2), false},
		{"not-v6 list, v4 packet", model.Rule{NotDstNets: nets("fd00::/64")}, tcp("10.0.0.1", "10.0.0.2", 1, 2), false},
		{"not-v6 list, v6 packet outside", model.Rule{NotDstNets: nets("fd00::/64")}, tcp("fd00::1", "fd01::2", 1, 2), true},
		{"mixed not-list, v6 packet outside", model.Rule{NotSrcNets: nets("10.0.0.0/8", "fd01::/64")}, tcp("fd00::1", "fd00::2", 1, 2), true},
		{"v4 list, v6 packet", model.Rule{SrcNets: nets("0.0.0.0/0")}, tcp("fd00::1", "fd00::2", 1, 2), false},
		{"mixed list, v6 packet", model.Rule{SrcNets: nets("10.0.0.0/8", "::/0")}, tcp("fd00::1", "fd00::2", 1, 2), true},
		{"ip_version 6, v4 packet", model.Rule{IPVersion: 6}, tcp("10.0.0.1", "10.0.0.2", 1, 2), false},
		{"icmpv6 type, v4 icmp", model.Rule{Protocol: proto("icmpv6"), ICMP: &model.ICMPMatch{Type: 128}}, icmp("10.0.0.1", "10.0.0.2", 128, 0), false},
		{"icmpv6 type, v6 echo", model.Rule{Protocol: proto("icmpv6"), ICMP: &model.ICMPMatch{Type: 128}}, icmp("fd00::1", "fd00::2", 128, 0), true},
		{"not icmp type, v6 other", model.Rule{IPVersion: 6, NotICMP: &model.ICMPMatch{Type: 128}}, icmp("fd00::1", "fd00::2", 129, 0), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.rule.Action = model.ActionAllow
			pol := allowIf(tc.rule)
			if ref := refEval(pol, tc.pkt) == "+p#0"; ref != tc.matches {
				t.Fatalf("reference evaluator says %v, want %v", ref, tc.matches)
			}
			spec, err := Compile(pol, model.Egress, randSetIDs, Options{})
			if err != nil {
				t.Fatal(err)
			}
			prog, err := spec.Load(h.maps)
			if err != nil {
				t.Fatal(err)
			}
			defer prog.Close()
			if ret, _ := h.run(prog, tc.pkt); (ret == retAllow) != tc.matches {
				t.Fatalf("compiled program returned %d, want match %v", ret, tc.matches)
			}
		})
	}
}
