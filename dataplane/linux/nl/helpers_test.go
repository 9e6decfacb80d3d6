package nl

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

const deadline = 10 * time.Second

var linkSeq atomic.Uint32

// testPrefix is a per-process interface prefix, so parallel test binaries
// (and other packages' "cali" workloads) never match our monitors.
func testPrefix(kind string) string {
	return fmt.Sprintf("%s%d", kind, os.Getpid()%10000)
}

// uniqueName returns prefix plus a sequence letter pair, within IFNAMSIZ.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, linkSeq.Add(1))
}

// addLink creates a link named name, admin down, deleted in t.Cleanup even
// on failure. It is one end of a veth (this kernel has no dummy driver)
// whose peer, named outside every test prefix, is up, so name's state
// follows its admin state.
func addLink(t *testing.T, name string) netlink.Link {
	t.Helper()
	peer := fmt.Sprintf("nly%d-%d", os.Getpid()%10000, linkSeq.Add(1))
	l := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}
	if err := netlink.LinkAdd(l); err != nil {
		t.Fatalf("add veth %s: %v", name, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	p, err := netlink.LinkByName(peer)
	if err != nil {
		t.Fatalf("look up %s: %v", peer, err)
	}
	if err := netlink.LinkSetUp(p); err != nil {
		t.Fatalf("set %s up: %v", peer, err)
	}
	got, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("look up %s: %v", name, err)
	}
	return got
}

// reports records a monitor's reports for assertions.
type reports struct {
	mu  sync.Mutex
	all []model.LinkUpdate
}

func (r *reports) add(u model.LinkUpdate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, u)
}

// last returns the latest state reported for name; ok false if none.
func (r *reports) last(name string) (model.LinkState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.all) - 1; i >= 0; i-- {
		if r.all[i].Name == name {
			return r.all[i].State, true
		}
	}
	return 0, false
}

func (r *reports) snapshot() []model.LinkUpdate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]model.LinkUpdate(nil), r.all...)
}

func (r *reports) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, u := range r.all {
		if u.Name == name {
			n++
		}
	}
	return n
}

// waitReported waits until the latest report for name is want.
func (r *reports) waitReported(t *testing.T, name string, want model.LinkState) {
	t.Helper()
	testutil.WaitFor(t, deadline, fmt.Sprintf("%s reported %s", name, want), func() bool {
		st, ok := r.last(name)
		return ok && st == want
	})
}

// startMonitor runs a monitor until the test ends and waits until its
// initial listing is done.
func startMonitor(t *testing.T, cfg MonitorConfig) (*Monitor, *reports) {
	t.Helper()
	m, err := NewMonitor(cfg)
	if err != nil {
		t.Fatalf("new monitor: %v", err)
	}
	rep := &reports{}
	runMonitor(t, m, rep.add)
	return m, rep
}

// runMonitor runs m with report until the test ends (then closes m) and
// waits until its initial listing is done.
func runMonitor(t *testing.T, m *Monitor, report func(model.LinkUpdate)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx, report) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("monitor run: %v", err)
		}
		_ = m.Close()
	})
	testutil.WaitFor(t, deadline, "monitor synced", m.synced.Load)
}

func newConfigurer(t *testing.T) *Configurer {
	t.Helper()
	c, err := NewConfigurer(Config{})
	if err != nil {
		t.Fatalf("new configurer: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// nsLink returns a link inside a named network namespace.
func nsLink(t *testing.T, ns, name string) netlink.Link {
	t.Helper()
	return nsLinkTB(t, ns, name)
}

func nsLinkTB(t testing.TB, ns, name string) netlink.Link {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatalf("open netns %s: %v", ns, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", ns, err)
	}
	defer nh.Close()
	l, err := nh.LinkByName(name)
	if err != nil {
		t.Fatalf("%s in %s: %v", name, ns, err)
	}
	return l
}

// workloadMAC is the MAC of the workload side (eth0) of w.
func workloadMAC(t *testing.T, w *testutil.Workload) net.HardwareAddr {
	t.Helper()
	return nsLink(t, w.NS, "eth0").Attrs().HardwareAddr
}

// testIPs returns two per-process workload addresses, unlikely to collide
// with other packages' tests running at the same time.
func testIPs(host int) string {
	return fmt.Sprintf("10.65.%d.%d", 100+os.Getpid()%150, host)
}
