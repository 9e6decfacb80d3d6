package engine

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func randomMember(rng *rand.Rand) model.IPSetMember {
	var a netip.Addr
	switch rng.IntN(4) {
	case 0:
		a = netip.AddrFrom4([4]byte{10, byte(rng.IntN(3)), byte(rng.IntN(3)), byte(rng.IntN(3))})
	case 1:
		a = netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(rng.IntN(3))})
	case 2:
		a = netip.AddrFrom16(netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(3))}).As16()) // 4in6
	default:
		if rng.IntN(4) == 0 {
			return model.IPSetMember{} // invalid
		}
		a = netip.AddrFrom4([4]byte{byte(rng.IntN(256)), 0, 0, 1})
	}
	m := model.IPSetMember{Prefix: netip.PrefixFrom(a, rng.IntN(a.BitLen()+2))} // +2: some invalid lengths
	if rng.IntN(3) == 0 {
		m.Proto, m.Port = uint8(rng.IntN(3)*6), uint16(rng.IntN(3)*40)
	}
	return m
}

// TestSetMemberMatchesModel: the compact form round-trips and orders
// members exactly as model.IPSetMember.Compare does.
func TestSetMemberMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		a, b := randomMember(rng), randomMember(rng)
		if got := toSetMember(a).model(); got != a {
			t.Fatalf("%v round-trips to %v", a, got)
		}
		if got, want := compareSetMember(toSetMember(a), toSetMember(b)), a.Compare(b); got != want {
			t.Fatalf("compare(%v, %v) = %d, model says %d", a, b, got, want)
		}
	}
}

// TestMergeSetMembers checks the in-place merge against plain set
// arithmetic.
func TestMergeSetMembers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	sample := func(n int) []setMember {
		ms := make([]model.IPSetMember, n)
		for i := range ms {
			ms[i] = randomMember(rng)
		}
		return toSetMembers(ms)
	}
	for range 2000 {
		have, add, del := sample(rng.IntN(200)), sample(rng.IntN(20)), sample(rng.IntN(20))
		add = slices.DeleteFunc(add, func(m setMember) bool { return containsSetMember(have, m) })
		var want []setMember
		for _, m := range have {
			if !containsSetMember(del, m) {
				want = append(want, m)
			}
		}
		want = append(want, add...)
		slices.SortFunc(want, compareSetMember)
		if got := mergeSetMembers(slices.Clone(have), add, del); !slices.Equal(got, want) {
			t.Fatalf("merge(%v, +%v, -%v) = %v, want %v", have, add, del, got, want)
		}
	}
}
