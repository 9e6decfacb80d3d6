package tcbpf

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpd-dev/dpd/internal/sorted"
)

func randomMembers(rng *rand.Rand, n int) []member {
	out := make([]member, n)
	for i := range out {
		m := member{bits: uint8(rng.IntN(3) * 16), proto: uint8(rng.IntN(2) * 6)}
		m.addr[0], m.addr[15] = byte(rng.IntN(4)), byte(rng.IntN(4))
		out[i] = m
	}
	slices.SortFunc(out, compareMember)
	return slices.Compact(out)
}

func memberSet(ms ...[]member) map[member]bool {
	out := map[member]bool{}
	for _, s := range ms {
		for _, m := range s {
			out[m] = true
		}
	}
	return out
}

// TestSortedSetOps checks diffSorted and applySorted (also with deletions
// that alias the slice they delete from) against plain set arithmetic.
func TestSortedSetOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 3000 {
		have, want := randomMembers(rng, rng.IntN(40)), randomMembers(rng, rng.IntN(40))
		add, del := sorted.Diff(have, want, compareMember)
		if !slices.IsSortedFunc(add, compareMember) || !slices.IsSortedFunc(del, compareMember) {
			t.Fatalf("diff of %v and %v not sorted: +%v -%v", have, want, add, del)
		}
		got := sorted.Apply(slices.Clone(have), add, del, compareMember)
		if !slices.Equal(got, want) {
			t.Fatalf("apply(%v, +%v, -%v) = %v, want %v", have, add, del, got, want)
		}
		// A prefix of have deleted from have itself, as removals do.
		n := rng.IntN(len(have) + 1)
		h := slices.Clone(have)
		got = sorted.Apply(h, nil, h[:n], compareMember)
		if !maps.Equal(memberSet(got), memberSet(have[n:])) || !slices.IsSortedFunc(got, compareMember) {
			t.Fatalf("deleting the first %d of %v left %v", n, have, got)
		}
	}
}
