package nl

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// burstDeadline bounds each phase of the burst test: thousands of link
// events on a shared two-core machine.
const burstDeadline = 60 * time.Second

// monitorIn returns a monitor whose handle and subscription live in ns.
func monitorIn(t *testing.T, ns string, cfg MonitorConfig) *Monitor {
	t.Helper()
	var m *Monitor
	inNetns(t, ns, func() {
		var err error
		if m, err = NewMonitor(cfg); err != nil {
			t.Errorf("new monitor in %s: %v", ns, err)
		}
	})
	h, err := netns.GetFromName(ns)
	if err != nil {
		_ = m.Close()
		t.Fatalf("open netns %s: %v", ns, err)
	}
	t.Cleanup(func() { _ = h.Close() }) // after the monitor stops (cleanups run last-in first-out)
	m.ns = &h
	return m
}

// ipBatch runs ip commands from lines inside ns, in one process.
func ipBatch(t *testing.T, ns string, lines []string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "links.batch")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Run(t, "ip", "-n", ns, "-batch", f)
}

// stuckCallback is a report callback the test can hold, as a consumer is
// held behind a long endpoint apply.
type stuckCallback struct {
	mu   sync.Mutex
	gate chan struct{} // non-nil while stuck, closed on release; guarded by mu
	rep  reports
}

func (s *stuckCallback) report(u model.LinkUpdate) {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil {
		<-g
	}
	s.rep.add(u)
}

func (s *stuckCallback) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *stuckCallback) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

// TestMonitorBurst: 1,500 veth pairs appear, then all disappear within a
// fraction of a second (3,000 links, thousands of events each time), each
// burst while the report callback is stuck. The cache follows the kernel
// regardless; once the callback runs again every workload interface is
// reported once, with its latest state.
func TestMonitorBurst(t *testing.T) {
	ns := namedNetns(t, "m")
	m := monitorIn(t, ns, MonitorConfig{Prefixes: []string{"bw"}, ResyncInterval: time.Hour})
	if !m.forceRcvbuf {
		t.Error("running as root, the monitor cannot force its receive buffer")
	}
	testBursts(t, ns, m)
}

// TestMonitorBurstOverflow: the same bursts with a receive buffer of a few
// messages, so the subscription overflows (ENOBUFS) and is re-opened, and
// re-lists race the bursts: the cache and the reports converge all the same.
func TestMonitorBurstOverflow(t *testing.T) {
	ns := namedNetns(t, "o")
	quiet := slog.New(slog.DiscardHandler) // resubscribe warnings are expected
	m := monitorIn(t, ns, MonitorConfig{Prefixes: []string{"bw"}, ResyncInterval: time.Hour, Logger: quiet})
	m.rcvbuf, m.forceRcvbuf = 4096, false
	testBursts(t, ns, m)
}

func testBursts(t *testing.T, ns string, m *Monitor) {
	const pairs = 1500
	cb := &stuckCallback{}
	runMonitor(t, m, cb.report)
	t.Cleanup(cb.release) // before the monitor stops: Run waits for the callback

	all := make([]string, 0, 2*pairs)
	workloads := make([]string, 0, pairs)
	adds := make([]string, 0, pairs)
	for i := range pairs {
		// Group 7 lets one command delete them all.
		adds = append(adds, fmt.Sprintf("link add bw%d group 7 type veth peer name px%d group 7", i, i))
		workloads = append(workloads, fmt.Sprintf("bw%d", i))
		all = append(all, fmt.Sprintf("bw%d", i), fmt.Sprintf("px%d", i))
	}
	burst := func(what string, want model.LinkState, run func()) {
		t.Helper()
		before := len(cb.rep.snapshot())
		cb.hold()
		run()
		testutil.WaitFor(t, burstDeadline, what+": the cache follows, the callback stuck", func() bool {
			for _, n := range all {
				if m.LinkState(n) != want {
					return false
				}
			}
			return true
		})
		cb.release()
		testutil.WaitFor(t, burstDeadline, what+": every workload interface reported", func() bool {
			for _, n := range workloads {
				if st, ok := cb.rep.last(n); !ok || st != want {
					return false
				}
			}
			return true
		})
		// At most one report was taken before the callback got stuck; the
		// rest were coalesced to the latest state per interface.
		if n := len(cb.rep.snapshot()) - before; n > pairs+1 {
			t.Errorf("%s: %d reports for %d interfaces: pending reports not coalesced", what, n, pairs)
		}
	}

	burst("1,500 veth pairs added", model.LinkDown, func() { ipBatch(t, ns, adds) })
	burst("all deleted at once", model.LinkAbsent, func() {
		testutil.Run(t, "ip", "-n", ns, "link", "del", "group", "7")
	})
	for _, u := range cb.rep.snapshot() {
		if !strings.HasPrefix(u.Name, "bw") {
			t.Fatalf("non-matching %s reported", u.Name)
		}
	}
	t.Logf("monitor stats after the bursts: %+v", m.Stats())
}
