package nl

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

func TestDiffHostLinks(t *testing.T) {
	a := netip.MustParseAddr("10.0.0.1")
	last := map[string]model.HostLinkUpdate{
		"eth0": {Name: "eth0", State: model.LinkUp, Addrs: []netip.Addr{a}},
		"eth1": {Name: "eth1", State: model.LinkUp},
	}
	cur := map[string]model.HostLinkUpdate{
		"eth0": {Name: "eth0", State: model.LinkUp, Addrs: []netip.Addr{a}},
		"eth2": {Name: "eth2", State: model.LinkDown},
	}
	got := diffHostLinks(last, cur)
	want := []model.HostLinkUpdate{{Name: "eth1", State: model.LinkAbsent}, {Name: "eth2", State: model.LinkDown}}
	if !slices.EqualFunc(got, want, func(x, y model.HostLinkUpdate) bool {
		return x.Name == y.Name && x.State == y.State && slices.Equal(x.Addrs, y.Addrs)
	}) {
		t.Fatalf("diff %+v, want %+v", got, want)
	}
}

// The watcher reports every interface but the skipped ones with their
// addresses, then follows links and addresses as they come and go.
func TestWatchHostLinks(t *testing.T) {
	ns := namedNetns(t, "h")
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	testutil.Run(t, "ip", "-n", ns, "link", "add", "eth7", "type", "veth", "peer", "name", "p7")
	testutil.Run(t, "ip", "-n", ns, "addr", "add", "10.9.0.1/24", "dev", "eth7")
	testutil.Run(t, "ip", "-n", ns, "link", "add", "cali7", "type", "veth", "peer", "name", "p7c")

	var mu sync.Mutex
	seen := map[string]model.HostLinkUpdate{}
	reports := 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- WatchHostLinks(ctx, HostLinkOptions{Namespace: &h, Skip: func(n string) bool { return strings.HasPrefix(n, "cali") }},
			func(u model.HostLinkUpdate) {
				mu.Lock()
				defer mu.Unlock()
				seen[u.Name] = u
				reports++
			})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	})
	has := func(name, addr string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			u, ok := seen[name]
			if addr == "" {
				return ok && u.State == model.LinkAbsent
			}
			return ok && u.State != model.LinkAbsent && slices.Contains(u.Addrs, netip.MustParseAddr(addr))
		}
	}
	testutil.WaitFor(t, 10*time.Second, "eth7 with its address", has("eth7", "10.9.0.1"))
	testutil.WaitFor(t, 10*time.Second, "lo with its address", has("lo", "127.0.0.1"))
	mu.Lock()
	_, cali := seen["cali7"]
	mu.Unlock()
	if cali {
		t.Error("a skipped interface was reported")
	}
	testutil.Run(t, "ip", "-n", ns, "link", "add", "eth8", "type", "veth", "peer", "name", "p8")
	testutil.Run(t, "ip", "-n", ns, "addr", "add", "10.9.1.1/24", "dev", "eth8")
	testutil.WaitFor(t, 10*time.Second, "the new eth8 with its address", has("eth8", "10.9.1.1"))
	testutil.Run(t, "ip", "-n", ns, "link", "del", "eth7")
	testutil.WaitFor(t, 10*time.Second, "eth7 gone", has("eth7", ""))
}
