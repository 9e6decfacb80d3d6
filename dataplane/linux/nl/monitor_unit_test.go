package nl

import (
	"log/slog"
	"net"
	"slices"
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
	m := &Monitor{
		prefixes:     []string{"cali"},
		linksLocked:  map[string]linkEntry{},
		namesByIndex: map[int]string{},
		reported:     map[string]model.LinkState{},
		log:          slog.New(slog.DiscardHandler),
	}
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
