package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// FuzzIPSetsPage: any page token and page size either is refused with
// ErrBadPageToken or lists a run of the set's members in order, at most
// the size asked for, the next page starting right after it.
func FuzzIPSetsPage(f *testing.F) {
	h := newHarness(f)
	h.session()
	var ms []string
	for i := range 40 {
		ms = append(ms, fmt.Sprintf("10.0.%d.%d", i%3, i))
	}
	h.send(ipset("s", ms...), inSync())
	ctx := context.Background()
	all, err := h.e.IPSets(ctx, IPSetQuery{ID: "s", MaxMembers: 1000})
	if err != nil || len(all) != 1 || len(all[0].Members) != len(ms) {
		f.Fatalf("IPSets = %+v, %v", all, err)
	}
	full := all[0].Members
	first, err := h.e.IPSets(ctx, IPSetQuery{ID: "s", MaxMembers: 7})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(first[0].NextPage, uint8(7))
	f.Add("", uint8(0))
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", uint8(3))
	f.Add("not a token", uint8(5))
	f.Fuzz(func(t *testing.T, token string, size uint8) {
		got, err := h.e.IPSets(ctx, IPSetQuery{ID: "s", MaxMembers: int(size), PageToken: token})
		if errors.Is(err, ErrBadPageToken) {
			return
		}
		if err != nil || len(got) != 1 {
			t.Fatalf("IPSets(%q, %d) = %+v, %v", token, size, got, err)
		}
		page := got[0]
		if len(page.Members) > int(size) || page.MemberCount != len(full) {
			t.Fatalf("page of %d members (count %d) for size %d", len(page.Members), page.MemberCount, size)
		}
		if len(page.Members) == 0 {
			return
		}
		at := slices.Index(full, page.Members[0])
		if at < 0 || !slices.Equal(full[at:at+len(page.Members)], page.Members) {
			t.Fatalf("page %v is not a run of the members", page.Members)
		}
		if end := at + len(page.Members); (page.NextPage != "") != (end < len(full)) {
			t.Fatalf("page ends at %d of %d, next page token %q", end, len(full), page.NextPage)
		}
	})
}
