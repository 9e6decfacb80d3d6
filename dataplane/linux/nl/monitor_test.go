package nl

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestMonitorLifecycle: appear, up, down, delete, each reported from events
// alone (the resync is an hour away); non-matching names are never reported.
func TestMonitorLifecycle(t *testing.T) {
	testutil.RequirePrivileged(t)
	prefix := testPrefix("nlm")
	m, rep := startMonitor(t, MonitorConfig{Prefixes: []string{prefix}, ResyncInterval: time.Hour})

	other := uniqueName(testPrefix("nlx"))
	ol := addLink(t, other)
	if err := netlink.LinkSetUp(ol); err != nil {
		t.Fatal(err)
	}

	name := uniqueName(prefix)
	l := addLink(t, name)
	rep.waitReported(t, name, model.LinkDown)
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	rep.waitReported(t, name, model.LinkUp)
	if st := m.LinkState(name); st != model.LinkUp {
		t.Fatalf("LinkState = %s, want up", st)
	}
	if idx, ok := m.Ifindex(name); !ok || idx != l.Attrs().Index {
		t.Fatalf("Ifindex = %d, %v; want %d", idx, ok, l.Attrs().Index)
	}
	if err := netlink.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	rep.waitReported(t, name, model.LinkDown)
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	rep.waitReported(t, name, model.LinkAbsent)
	if st := m.LinkState(name); st != model.LinkAbsent {
		t.Fatalf("LinkState after delete = %s", st)
	}

	// Events arrive in order, so the other link's events were handled
	// before ours: it is cached but was never reported.
	if n := rep.count(other); n != 0 {
		t.Fatalf("non-matching %s reported %d times", other, n)
	}
	if st := m.LinkState(other); st != model.LinkUp {
		t.Fatalf("LinkState(%s) = %s, want up from the cache", other, st)
	}
	if s := m.Stats(); s.Events == 0 || s.Resyncs != 1 {
		t.Fatalf("stats %+v: want events and only the initial resync", s)
	}
}

// TestMonitorVethPeer: a workload veth is up only while its peer is up.
func TestMonitorVethPeer(t *testing.T) {
	testutil.RequirePrivileged(t)
	prefix := testPrefix("nlv")
	_, rep := startMonitor(t, MonitorConfig{Prefixes: []string{prefix}, ResyncInterval: time.Hour})
	w := testutil.NewWorkload(t, prefix, testIPs(9))
	rep.waitReported(t, w.HostIface, model.LinkUp)
	if out, err := w.Exec("ip", "link", "set", "eth0", "down"); err != nil {
		t.Fatalf("peer down: %v %s", err, out)
	}
	rep.waitReported(t, w.HostIface, model.LinkDown)
	if out, err := w.Exec("ip", "link", "set", "eth0", "up"); err != nil {
		t.Fatalf("peer up: %v %s", err, out)
	}
	rep.waitReported(t, w.HostIface, model.LinkUp)
}

// TestMonitorResyncRepairs corrupts the cache and waits for the periodic
// resync (no link event happens meanwhile) to put it right.
func TestMonitorResyncRepairs(t *testing.T) {
	testutil.RequirePrivileged(t)
	prefix := testPrefix("nlr")
	m, rep := startMonitor(t, MonitorConfig{Prefixes: []string{prefix}, ResyncInterval: 50 * time.Millisecond})

	a, b := uniqueName(prefix), uniqueName(prefix)
	for _, n := range []string{a, b} {
		if err := netlink.LinkSetUp(addLink(t, n)); err != nil {
			t.Fatal(err)
		}
		rep.waitReported(t, n, model.LinkUp)
	}
	phantom := uniqueName(prefix)

	before := m.Stats()
	countA, countB := rep.count(a), rep.count(b)
	m.mu.Lock()
	e := m.linksLocked[a]
	e.state = model.LinkDown // wrong state
	m.linksLocked[a] = e
	delete(m.linksLocked, b)                                                // lost link
	m.linksLocked[phantom] = linkEntry{index: 1 << 30, state: model.LinkUp} // invented link
	m.mu.Unlock()

	testutil.WaitFor(t, deadline, "resync repairs the cache", func() bool {
		return m.LinkState(a) == model.LinkUp && m.LinkState(b) == model.LinkUp &&
			m.LinkState(phantom) == model.LinkAbsent
	})
	if d := m.Stats(); d.ResyncRepairs-before.ResyncRepairs < 3 || d.Resyncs <= before.Resyncs {
		t.Fatalf("stats before %+v after %+v: want >= 3 repairs by resync", before, d)
	}
	// The engine was told the truth all along: no spurious reports.
	if rep.count(a) != countA || rep.count(b) != countB || rep.count(phantom) != 0 {
		t.Fatalf("unexpected reports: %+v", rep.snapshot())
	}
}

// TestMonitorSetPrefixes: a link that starts matching is reported.
func TestMonitorSetPrefixes(t *testing.T) {
	testutil.RequirePrivileged(t)
	oldPrefix, newPrefix := testPrefix("nlo"), testPrefix("nln")
	name := uniqueName(newPrefix)
	if err := netlink.LinkSetUp(addLink(t, name)); err != nil {
		t.Fatal(err)
	}
	m, rep := startMonitor(t, MonitorConfig{Prefixes: []string{oldPrefix}, ResyncInterval: time.Hour})
	if rep.count(name) != 0 {
		t.Fatalf("%s reported before its prefix was configured", name)
	}
	m.SetPrefixes(ParsePrefixes(oldPrefix + "," + newPrefix))
	rep.waitReported(t, name, model.LinkUp)
	if !m.Matches(name) {
		t.Fatal("Matches false after SetPrefixes")
	}
}

// TestMonitorNotRunning: LinkState and Ifindex fall back to the kernel.
func TestMonitorNotRunning(t *testing.T) {
	testutil.RequirePrivileged(t)
	m, err := NewMonitor(MonitorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	name := uniqueName(testPrefix("nlf"))
	l := addLink(t, name)
	if st := m.LinkState(name); st != model.LinkDown {
		t.Fatalf("LinkState = %s, want down", st)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	if st := m.LinkState(name); st != model.LinkUp {
		t.Fatalf("LinkState = %s, want up", st)
	}
	if idx, ok := m.Ifindex(name); !ok || idx != l.Attrs().Index {
		t.Fatalf("Ifindex = %d, %v", idx, ok)
	}
	if st := m.LinkState(name + "x"); st != model.LinkAbsent {
		t.Fatalf("absent link state %s", st)
	}
}

// TestMonitorStopsCleanly: cancelling Run releases the subscription and its
// goroutines, and a stopped monitor can run again.
func TestMonitorStopsCleanly(t *testing.T) {
	testutil.RequirePrivileged(t)
	baseline := runtime.NumGoroutine()
	m, err := NewMonitor(MonitorConfig{Prefixes: []string{testPrefix("nls")}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- m.Run(ctx, func(model.LinkUpdate) {}) }()
		testutil.WaitFor(t, deadline, "monitor synced", m.synced.Load)
		if err := m.Run(ctx, nil); err == nil {
			t.Fatal("second concurrent Run accepted")
		}
		cancel()
		if err := <-errc; err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	testutil.WaitFor(t, deadline, "monitor goroutines gone", func() bool {
		return runtime.NumGoroutine() <= baseline
	})
}
