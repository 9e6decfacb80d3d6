package linux

import (
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/flowhist"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/internal/bench/tcpload"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// flowLoadEnv runs TestFlowEventsUnderConnectionLoad: seconds of load.
const flowLoadEnv = "DPD_FLOW_LOAD"

// TestFlowEventsUnderConnectionLoad measures flow events under a new
// connection after another between two real veths (two new flows each: the
// client's egress and the server's ingress) and prints what a subscriber
// got: events, their delivery latency (the event's coarse kernel time to
// the subscriber's receipt, so up to a clock tick too high), the events
// lost on the way, the process CPU per connection with events on and off
// (the load generator's included: a rough figure on a shared machine), and
// the userspace handling of an event, replayed. Figures are printed, not
// asserted; what must hold is that every connection's two decisions are
// delivered or counted lost.
func TestFlowEventsUnderConnectionLoad(t *testing.T) {
	if os.Getenv(flowLoadEnv) == "" {
		t.Skipf("set %s=1 to measure (seconds of load)", flowLoadEnv)
	}
	const phase = 2 * time.Second
	k := openKernelWith(t, Options{PinDir: newPinDir(t), Flows: FlowOptions{History: 100000}})
	watch(t, k)
	a, b := newWorkload(t, "10.77.9.31"), newWorkload(t, "10.77.9.32")
	testutil.WaitFor(t, 5*time.Second, "both interfaces seen", func() bool {
		_, okA := k.mon.Ifindex(a.HostIface)
		_, okB := k.mon.Ifindex(b.HostIface)
		return okA && okB
	})
	for i, w := range []*testutil.Workload{a, b} {
		if err := applyKnown(t, k, allowAllEndpoint(w, i+1)); err != nil {
			t.Fatalf("apply %s: %v", w.HostIface, err)
		}
	}
	var srv *tcpload.Server
	if err := testutil.InNetns(b.NS, func() (err error) {
		srv, err = tcpload.Listen(netip.MustParseAddrPort(b.IP + ":0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dst := netip.AddrPortFrom(netip.MustParseAddr(b.IP), uint16(srv.Port()))
	src := tcpload.NewSources(netip.MustParseAddr(a.IP))

	run := func(events bool) (conns int64, cpu time.Duration, lat []time.Duration, got, lost uint64) {
		t.Helper()
		if err := k.datapath().SetEvents(events, time.Second); err != nil {
			t.Fatal(err)
		}
		_, sub := k.ObserveFlows(time.Now(), 0, true, 1<<16)
		defer sub.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev := range sub.Events() {
				lost += ev.Lost
				if ev.End || ev.Proto != unix.IPPROTO_TCP {
					continue
				}
				got++
				lat = append(lat, time.Since(ev.Time))
			}
		}()
		var ru0, ru1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
		var res tcpload.Result
		err := testutil.InNetns(a.NS, func() (err error) { res, err = tcpload.ConnectionRate(dst, src, phase); return err })
		if err != nil {
			t.Fatal(err)
		}
		// The stragglers: every decision is in the history once read.
		if events {
			testutil.WaitFor(t, 5*time.Second, "the ring read", func() bool {
				st := k.FlowStats()
				return st.Read+st.KernelDrops >= 2*uint64(res.Ops)
			})
		}
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
		sub.Close()
		<-done
		cpu = time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
		return res.Ops, cpu, lat, got, lost
	}
	offConns, offCPU, _, offGot, _ := run(false)
	before := k.FlowStats()
	onConns, onCPU, lat, got, lost := run(true)
	after := k.FlowStats()
	if offGot != 0 {
		t.Errorf("%d events with events off", offGot)
	}
	kdrops := after.KernelDrops - before.KernelDrops
	if want := 2 * uint64(onConns); got+lost+kdrops < want {
		t.Fatalf("%d connections: %d events delivered, %d lost by the subscriber, %d dropped by the kernel; want %d accounted for",
			onConns, got, lost, kdrops, want)
	}
	// The userspace side of each event once read (naming the interface
	// and rule under the kernel lock, the history and one subscriber),
	// replayed CPU-bound over what the load produced; reading and decoding
	// the ring is BenchmarkEventRead's.
	replay := k.flows.hist.Since(time.Time{}, 0)
	h := flowhist.New(len(replay))
	_, rsub := h.Subscribe(time.Time{}, 0, len(replay))
	cache := &flowCache{ifaces: map[int]string{}, rules: map[loadedProgram]map[uint64]model.RuleInfo{}}
	start := time.Now()
	for i := range replay {
		ev := replay[i]
		ev.Iface, ev.RuleFound = "", false
		k.mu.Lock()
		k.resolveFlowLocked(&ev, cache)
		k.mu.Unlock()
		h.Add(ev)
	}
	perEvent := time.Since(start) / time.Duration(max(len(replay), 1))
	rsub.Close()
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	perConn := func(cpu time.Duration, n int64) time.Duration { return cpu / time.Duration(max(n, 1)) }
	rate := float64(2*onConns) / phase.Seconds()
	t.Logf("events off: %d connections in %s (%.0f new flows/s), process CPU %s (%s a connection)",
		offConns, phase, float64(2*offConns)/phase.Seconds(), offCPU, perConn(offCPU, offConns))
	t.Logf("events on:  %d connections (%.0f new flows/s), process CPU %s (%s a connection): %d events delivered, %d lost by the subscriber, %d dropped by the kernel",
		onConns, rate, onCPU, perConn(onCPU, onConns), got, lost, kdrops)
	t.Logf("delivery latency p50 %s, p99 %s, max %s (ring polled every %s)", pct(0.5), pct(0.99), pct(1), tcbpf.EventPoll)
	t.Logf("userspace handling of an event after its read: %s (replayed over %d events), %.2f %% of a core at %.0f events/s",
		perEvent, len(replay), 100*perEvent.Seconds()*rate, rate)
}
