package nl

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Host links: the node's interfaces with their addresses, for host
// endpoints (bound by name, by expected address or by wildcard). Link and
// address events only wake the watcher; it then lists links and addresses
// (one dump each, coalescing a burst of events) and reports what differs
// from its last report, so a missed event costs nothing but the delay to
// the next listing (every resync interval at the latest).

// HostLinkOptions configure WatchHostLinks. Zero values take the defaults.
type HostLinkOptions struct {
	// Skip names interfaces not to report (workload interfaces: host
	// endpoints never bind them, and there may be thousands).
	Skip func(name string) bool
	// Coalesce is how long the watcher waits after an event before it
	// lists (default 50 ms).
	Coalesce time.Duration
	// ResyncInterval is the period of a listing without events (default
	// DefaultResyncInterval).
	ResyncInterval time.Duration
	// Namespace, when set, is the namespace to watch (tests).
	Namespace *netns.NsHandle
}

// WatchHostLinks reports every interface Skip does not name, first all of
// them, then each change (State LinkAbsent: gone), until ctx ends.
func WatchHostLinks(ctx context.Context, o HostLinkOptions, report func(model.HostLinkUpdate)) error {
	if o.Coalesce <= 0 {
		o.Coalesce = 50 * time.Millisecond
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.Skip == nil {
		o.Skip = func(string) bool { return false }
	}
	h, err := handleIn(o.Namespace)
	if err != nil {
		return err
	}
	defer h.Close()
	done := make(chan struct{})
	defer close(done)
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	links := make(chan netlink.LinkUpdate, updateBuffer)
	addrs := make(chan netlink.AddrUpdate, updateBuffer)
	onErr := func(error) { poke() }
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{Namespace: o.Namespace, ErrorCallback: onErr}); err != nil {
		return fmt.Errorf("subscribe to links: %w", err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{Namespace: o.Namespace, ErrorCallback: onErr}); err != nil {
		return fmt.Errorf("subscribe to addresses: %w", err)
	}
	go func() {
		for range links {
			poke()
		}
	}()
	go func() {
		for range addrs {
			poke()
		}
	}()
	last := map[string]model.HostLinkUpdate{}
	tick := time.NewTicker(o.ResyncInterval)
	defer tick.Stop()
	for {
		cur, err := listHostLinks(h, o.Skip)
		if err == nil {
			for _, u := range diffHostLinks(last, cur) {
				report(u)
			}
			last = cur
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-wake:
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(o.Coalesce):
			}
		}
	}
}

func handleIn(ns *netns.NsHandle) (*netlink.Handle, error) {
	var h *netlink.Handle
	var err error
	if ns != nil {
		h, err = netlink.NewHandleAt(*ns, unix.NETLINK_ROUTE)
	} else {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	return h, nil
}

// listHostLinks lists the interfaces and their addresses (sorted), retrying
// a dump the kernel interrupted.
func listHostLinks(h *netlink.Handle, skip func(string) bool) (map[string]model.HostLinkUpdate, error) {
	var ls []netlink.Link
	var as []netlink.Addr
	var err error
	for range dumpRetries {
		ls, err = h.LinkList()
		if err == nil {
			as, err = h.AddrList(nil, netlink.FAMILY_ALL)
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list host links: %w", err)
	}
	byIndex := map[int]string{}
	out := map[string]model.HostLinkUpdate{}
	for _, l := range ls {
		a := l.Attrs()
		if skip(a.Name) {
			continue
		}
		byIndex[a.Index] = a.Name
		out[a.Name] = model.HostLinkUpdate{Name: a.Name, State: stateOf(a)}
	}
	for _, a := range as {
		name, ok := byIndex[a.LinkIndex]
		if !ok || a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		u := out[name]
		u.Addrs = append(u.Addrs, ip.Unmap())
		out[name] = u
	}
	for name, u := range out {
		slices.SortFunc(u.Addrs, func(x, y netip.Addr) int { return x.Compare(y) })
		u.Addrs = slices.Compact(u.Addrs)
		out[name] = u
	}
	return out, nil
}

// diffHostLinks is what changed from last to cur, in name order.
func diffHostLinks(last, cur map[string]model.HostLinkUpdate) []model.HostLinkUpdate {
	var out []model.HostLinkUpdate
	for name, u := range cur {
		if o, ok := last[name]; !ok || o.State != u.State || !reflect.DeepEqual(o.Addrs, u.Addrs) {
			out = append(out, u)
		}
	}
	for name := range last {
		if _, ok := cur[name]; !ok {
			out = append(out, model.HostLinkUpdate{Name: name, State: model.LinkAbsent})
		}
	}
	slices.SortFunc(out, func(a, b model.HostLinkUpdate) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}
