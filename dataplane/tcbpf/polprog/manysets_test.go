package polprog

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// manySets is how many extra sets "m<i>" the differential tests load: ids
// 200 upwards, so they straddle the index's slots and go well past them.
const manySets = 1200

func manySetName(i int) string { return fmt.Sprintf("m%d", i) }

// manyV4 and manyV6 are set i's addresses; manyCollide is an IPv6
// address whose first four bytes are manyV4(i).
func manyV4(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}) }
func manyV6(i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("fd09::%x", i)) }
func manyCollide(i int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("a09:%02x%02x::1", byte(i>>8), byte(i)))
}

func init() {
	for i := range manySets {
		n := manySetName(i)
		randSetIDs[n] = uint32(200 + i)
		ms := []refMember{{pfx: netip.PrefixFrom(manyV4(i), 32)}}
		if i%3 == 0 {
			ms = append(ms, refMember{pfx: netip.PrefixFrom(manyV6(i), 128)})
		}
		if i%40 == 0 { // covers the /32s of the sets around it
			ms = append(ms, refMember{pfx: netip.PrefixFrom(manyV4(i), 24).Masked()})
		}
		if i%11 == 0 { // the IPv6 twin of the IPv4 /32's bytes
			ms = append(ms, refMember{pfx: netip.PrefixFrom(manyCollide(i), 32).Masked()})
		}
		if i%13 == 0 { // a named port with an IPv6 address
			ms = append(ms, refMember{pfx: netip.PrefixFrom(manyV6(i), 128), proto: 6, port: 80})
		}
		refSets[n] = ms
	}
}

// randManySetRule is a rule over one or two of the many sets, by source
// or destination, sometimes negated, sometimes with a port.
func randManySetRule(rng *rand.Rand) model.Rule {
	pick := func(n int) bool { return rng.IntN(n) == 0 }
	set := func() string { return manySetName(rng.IntN(manySets)) }
	r := model.Rule{Action: []model.Action{model.ActionAllow, model.ActionDeny, model.ActionDeny, model.ActionPass}[rng.IntN(4)]}
	switch rng.IntN(6) {
	case 0:
		r.DstIPSets = []string{set()}
	case 1:
		r.SrcIPSets = []string{set(), set()}
	case 2:
		r.NotSrcIPSets = []string{set()}
		r.DstIPSets = []string{set()}
	case 3:
		r.DstNamedPortSets = []string{set()}
	default:
		r.SrcIPSets = []string{set()}
	}
	if pick(4) {
		r.DstPorts = ports(80, 80)
	}
	if pick(10) {
		r.IPVersion = []uint8{4, 6}[rng.IntN(2)]
	}
	return r
}

func randManySetPolicy(rng *rand.Rand) model.DirectionPolicy {
	return randShapedPolicy(rng, policyShape{minTiers: 1, tiers: 2, policyRules: 300, profileRules: 40, rule: randManySetRule})
}

// randManySetPkt draws both addresses of one family from the sets'
// members (and their cross-family twins), so deep rules match.
func randManySetPkt(rng *rand.Rand) pkt {
	addr := func(v6 bool) string {
		i := rng.IntN(manySets)
		if !v6 {
			return manyV4(i).String()
		}
		if rng.IntN(2) == 0 {
			return manyCollide(i).String()
		}
		return manyV6(i).String()
	}
	v6 := rng.IntN(3) == 0
	port := []uint16{80, 443}[rng.IntN(2)]
	return tcp(addr(v6), addr(v6), 1000, port)
}

// TestDifferentialManySets covers policies over hundreds of the sets,
// most with ids past the index's slots, with members of both families
// whose bytes collide and named ports with IPv6 members.
func TestDifferentialManySets(t *testing.T) {
	policies := 24
	if testing.Short() {
		policies = 8
	}
	rng := rand.New(rand.NewPCG(19, 23))
	differential(t, false, policies, 150, func() model.DirectionPolicy { return randManySetPolicy(rng) }, func() pkt { return randManySetPkt(rng) })
}
