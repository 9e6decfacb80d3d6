package nl

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func linkMsg(typ uint16, index int, name string, up bool) netlink.LinkUpdate {
	a := netlink.NewLinkAttrs()
	a.Name, a.Index = name, index
	if up {
		a.Flags, a.OperState = net.FlagUp, netlink.OperUp
	} else {
		a.OperState = netlink.OperDown
	}
	u := netlink.LinkUpdate{Link: &netlink.Dummy{LinkAttrs: a}}
	u.Index = int32(index)
	u.Header.Type = typ
	return u
}

// TestApplyUpdate drives the cache with synthetic messages: no kernel.
func TestApplyUpdate(t *testing.T) {
	m := newUnitMonitor()
	type step struct {
		name string
		msg  netlink.LinkUpdate
		want []model.LinkUpdate
	}
	up := func(n string) model.LinkUpdate { return model.LinkUpdate{Name: n, State: model.LinkUp} }
	down := func(n string) model.LinkUpdate { return model.LinkUpdate{Name: n, State: model.LinkDown} }
	gone := func(n string) model.LinkUpdate { return model.LinkUpdate{Name: n, State: model.LinkAbsent} }
	for _, s := range []step{
		{"appears down", linkMsg(unix.RTM_NEWLINK, 10, "cali1", false), []model.LinkUpdate{down("cali1")}},
		{"repeat is silent", linkMsg(unix.RTM_NEWLINK, 10, "cali1", false), nil},
		{"goes up", linkMsg(unix.RTM_NEWLINK, 10, "cali1", true), []model.LinkUpdate{up("cali1")}},
		{"non-matching ignored", linkMsg(unix.RTM_NEWLINK, 11, "eth9", true), nil},
		{"rename", linkMsg(unix.RTM_NEWLINK, 10, "cali2", true), []model.LinkUpdate{up("cali2"), gone("cali1")}},
		{"stale delete of other index", linkMsg(unix.RTM_DELLINK, 99, "cali2", false), nil},
		{"delete", linkMsg(unix.RTM_DELLINK, 10, "cali2", false), []model.LinkUpdate{gone("cali2")}},
		{"delete again is silent", linkMsg(unix.RTM_DELLINK, 10, "cali2", false), nil},
		{"appears up", linkMsg(unix.RTM_NEWLINK, 20, "cali3", true), []model.LinkUpdate{up("cali3")}},
		// Its delete was missed: the same state under a new index is news.
		{"re-created", linkMsg(unix.RTM_NEWLINK, 21, "cali3", true), []model.LinkUpdate{up("cali3")}},
		{"stale delete of the old index", linkMsg(unix.RTM_DELLINK, 20, "cali3", false), nil},
	} {
		if got := m.applyUpdate(s.msg); !slices.Equal(got, s.want) {
			t.Fatalf("%s: reports %v, want %v", s.name, got, s.want)
		}
	}
	m.synced.Store(true)
	if st := m.LinkState("eth9"); st != model.LinkUp {
		t.Fatalf("non-matching link state %s, want up (cache holds every link)", st)
	}
	if idx, ok := m.Ifindex("eth9"); !ok || idx != 11 {
		t.Fatalf("Ifindex(eth9) = %d, %v", idx, ok)
	}

	// Widening the prefixes reports the link that now matches.
	m.prefixes = []string{"cali", "eth"}
	if got := m.pendingAll(); !slices.Equal(got, []model.LinkUpdate{up("eth9")}) {
		t.Fatalf("after prefix change: %v", got)
	}
}

func newUnitMonitor() *Monitor {
	return &Monitor{
		prefixes:     []string{"cali"},
		linksLocked:  map[string]linkEntry{},
		namesByIndex: map[int]string{},
		reported:     map[string]linkEntry{},
		log:          slog.New(slog.DiscardHandler),
	}
}

func listed(index int, name string, up bool) netlink.Link {
	return linkMsg(unix.RTM_NEWLINK, index, name, up).Link
}

func sortedUpdates(ups []model.LinkUpdate) []model.LinkUpdate {
	slices.SortFunc(ups, func(a, b model.LinkUpdate) int { return strings.Compare(a.Name, b.Name) })
	return ups
}

// TestApplyListingPartial: a listing from a dump the kernel kept flagging
// interrupted adds and updates what it lists (renames and re-creations
// included) but drops nothing it lacks; a complete one then does.
func TestApplyListingPartial(t *testing.T) {
	m := newUnitMonitor()
	up := func(n string) model.LinkUpdate { return model.LinkUpdate{Name: n, State: model.LinkUp} }
	down := func(n string) model.LinkUpdate { return model.LinkUpdate{Name: n, State: model.LinkDown} }
	gone := func(n string) model.LinkUpdate { return model.LinkUpdate{Name: n, State: model.LinkAbsent} }

	got, _ := m.applyListing([]netlink.Link{
		listed(10, "cali1", true), listed(11, "cali2", true), listed(12, "cali3", false), listed(13, "cali4", true),
	}, true)
	if want := []model.LinkUpdate{up("cali1"), up("cali2"), down("cali3"), up("cali4")}; !slices.Equal(sortedUpdates(got), want) {
		t.Fatalf("initial listing reports %v, want %v", got, want)
	}

	// Partial: cali1 changed, cali2 missing (it may exist), cali3 renamed
	// cali5, cali4 re-created with a new index, cali6 new.
	got, repairs := m.applyListing([]netlink.Link{
		listed(10, "cali1", false), listed(12, "cali5", false), listed(14, "cali4", true), listed(15, "cali6", true),
	}, false)
	want := []model.LinkUpdate{down("cali1"), gone("cali3"), up("cali4"), down("cali5"), up("cali6")}
	if !slices.Equal(sortedUpdates(got), want) {
		t.Fatalf("partial listing reports %v, want %v", got, want)
	}
	if repairs != 4 {
		t.Errorf("partial listing repairs %d, want 4", repairs)
	}
	m.synced.Store(true)
	if st := m.LinkState("cali2"); st != model.LinkUp {
		t.Fatalf("cali2, missing from the partial listing, is %s; want still up", st)
	}
	if idx, ok := m.Ifindex("cali4"); !ok || idx != 14 {
		t.Fatalf("Ifindex(cali4) = %d, %v; want the new 14", idx, ok)
	}
	if _, ok := m.namesByIndex[13]; ok {
		t.Fatal("the re-created link's old index is still mapped")
	}
	// Listing the same again changes nothing.
	if got, repairs := m.applyListing([]netlink.Link{listed(10, "cali1", false)}, false); len(got) != 0 || repairs != 0 {
		t.Fatalf("repeated partial listing: %v, %d repairs", got, repairs)
	}

	// Complete: what it lacks is gone.
	got, _ = m.applyListing([]netlink.Link{
		listed(10, "cali1", false), listed(12, "cali5", false), listed(14, "cali4", true), listed(15, "cali6", true),
	}, true)
	if want := []model.LinkUpdate{gone("cali2")}; !slices.Equal(got, want) {
		t.Fatalf("complete listing reports %v, want %v", got, want)
	}
}

// TestReportQueue: one pending state per name, the latest, in the order
// names were first queued; run stops with its context.
func TestReportQueue(t *testing.T) {
	q := newReportQueue()
	q.push([]model.LinkUpdate{{Name: "a", State: model.LinkDown}, {Name: "b", State: model.LinkUp}})
	q.push([]model.LinkUpdate{{Name: "a", State: model.LinkAbsent}, {Name: "c", State: model.LinkUp}})
	q.push([]model.LinkUpdate{{Name: "a", State: model.LinkUp}})
	var got []model.LinkUpdate
	for {
		u, ok := q.pop()
		if !ok {
			break
		}
		got = append(got, u)
	}
	want := []model.LinkUpdate{{Name: "a", State: model.LinkUp}, {Name: "b", State: model.LinkUp}, {Name: "c", State: model.LinkUp}}
	if !slices.Equal(got, want) {
		t.Fatalf("popped %v, want %v", got, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan model.LinkUpdate, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.run(ctx, func(u model.LinkUpdate) { seen <- u })
	}()
	q.push([]model.LinkUpdate{{Name: "d", State: model.LinkDown}})
	if u := <-seen; u.Name != "d" {
		t.Fatalf("run delivered %v", u)
	}
	cancel()
	<-done
}
