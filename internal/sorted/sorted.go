// Package sorted holds set operations on sorted slices, the compact form
// dpd keeps large sets in (IP set members in the engine and in
// dataplane/tcbpf): linear merges instead of per-element maps.
package sorted

import "slices"

// Diff returns what to add to have and delete from it to make it
// want; both sorted. Without overlap, the result aliases want or have
// instead of copying them (a new set, a removed one).
func Diff[T any](have, want []T, cmp func(a, b T) int) (add, del []T) {
	if len(have) == 0 {
		return want, nil
	}
	if len(want) == 0 {
		return nil, have
	}
	i, j := 0, 0
	for i < len(have) && j < len(want) {
		switch c := cmp(have[i], want[j]); {
		case c < 0:
			del = append(del, have[i])
			i++
		case c > 0:
			add = append(add, want[j])
			j++
		default:
			i++
			j++
		}
	}
	del = append(del, have[i:]...)
	add = append(add, want[j:]...)
	return add, del
}

// Apply returns have with add merged in and del taken out, in
// place where have's capacity allows: all sorted, add disjoint from have;
// elements of del not in have are ignored. Time is linear in len(have),
// extra memory only what growth or shrinking takes.
func Apply[T any](have, add, del []T, cmp func(a, b T) int) []T {
	if len(del) > 0 {
		w, j := 0, 0
		for _, v := range have {
			for j < len(del) && cmp(del[j], v) < 0 {
				j++
			}
			if j < len(del) && cmp(del[j], v) == 0 {
				j++
				continue
			}
			have[w] = v
			w++
		}
		clear(have[w:])
		have = have[:w]
	}
	if len(add) > 0 {
		n := len(have)
		have = slices.Grow(have, len(add))[:n+len(add)]
		i, k := n-1, len(have)-1
		for j := len(add) - 1; j >= 0; k-- {
			if i >= 0 && cmp(have[i], add[j]) > 0 {
				have[k] = have[i]
				i--
			} else {
				have[k] = add[j]
				j--
			}
		}
	}
	// Give back what a shrunken set no longer needs.
	if cap(have) > 64 && cap(have) > 2*len(have) {
		have = slices.Clone(have)
	}
	return have
}

// Contains reports whether sorted s holds v.
func Contains[T any](s []T, v T, cmp func(a, b T) int) bool {
	_, ok := slices.BinarySearchFunc(s, v, cmp)
	return ok
}
