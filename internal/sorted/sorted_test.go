package sorted

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

func randomSet(r *rand.Rand) []int {
	var s []int
	for v := range 64 {
		if r.IntN(3) == 0 {
			s = append(s, v)
		}
	}
	return s
}

// Diff then Apply turns have into want, for random sets, the empty ones
// included; Contains agrees with a linear search.
func TestDiffApply(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		have, want := randomSet(r), randomSet(r)
		add, del := Diff(have, want, cmp.Compare[int])
		got := Apply(slices.Clone(have), add, del, cmp.Compare[int])
		if !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
			t.Fatalf("have %v want %v: add %v del %v gave %v", have, want, add, del, got)
		}
		for v := range 64 {
			if Contains(want, v, cmp.Compare[int]) != slices.Contains(want, v) {
				t.Fatalf("Contains(%v, %d) wrong", want, v)
			}
		}
	}
}
