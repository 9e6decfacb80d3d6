package nl

import (
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestListLinkRefs: the lean listing names every link the library's full
// one does, with its index.
func TestListLinkRefs(t *testing.T) {
	testutil.RequirePrivileged(t)
	l := addLink(t, uniqueName(testPrefix("nlr")))
	refs, err := ListLinkRefs()
	if err != nil {
		t.Fatal(err)
	}
	full, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var want []LinkRef
	for _, fl := range full {
		want = append(want, LinkRef{Name: fl.Attrs().Name, Index: fl.Attrs().Index})
	}
	cmp := func(a, b LinkRef) int { return a.Index - b.Index }
	slices.SortFunc(refs, cmp)
	slices.SortFunc(want, cmp)
	if !slices.Equal(refs, want) {
		t.Errorf("ListLinkRefs = %v, want %v", refs, want)
	}
	if !slices.Contains(refs, LinkRef{Name: l.Attrs().Name, Index: l.Attrs().Index}) {
		t.Errorf("ListLinkRefs lacks %s", l.Attrs().Name)
	}
}
