package linux

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// walkCount counts a map's entries by reading it: occupied slots of a
// program array (one lookup per slot), keys of anything else (one syscall
// per key). This is the ground truth MapUsage must agree with, and what a
// scrape cost before it tracked counts.
func walkCount(m *ebpf.Map) (int, error) {
	if m.Type() == ebpf.ProgramArray {
		n := 0
		var id uint32
		for i := uint32(0); i < m.MaxEntries(); i++ {
			err := m.Lookup(i, &id)
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			n++
		}
		return n, nil
	}
	key := make([]byte, m.KeySize())
	next := make([]byte, m.KeySize())
	n := 0
	var prev any // nil asks for the first key
	for {
		err := m.NextKey(prev, &next)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
		copy(key, next)
		prev = key
	}
}

// walkAll counts every map MapUsage reports by walking it.
func walkAll(tb testing.TB, k *Kernel) map[string]int {
	tb.Helper()
	m := k.datapath().Maps()
	out := map[string]int{}
	for name, mp := range map[string]*ebpf.Map{
		"dpd_conntrack": m.Conntrack, "dpd_ipsets": m.IPSets, "dpd_ifstate": m.IfState, "dpd_rule_ctrs": m.RuleCtrs,
		"dpd_jump": m.Jump, "dpd_chain": m.Chain, "dpd_nat_fe": m.NATFrontends, "dpd_nat_be": m.NATBackends, "dpd_routes": m.Routes,
		"dpd_frags": m.Frags,
	} {
		n, err := walkCount(mp)
		if err != nil {
			tb.Fatalf("walk %s: %v", name, err)
		}
		out[name] = n
	}
	return out
}

func usageOf(tb testing.TB, k *Kernel) map[string]int {
	tb.Helper()
	usage, err := k.MapUsage()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int{}
	for _, u := range usage {
		if u.Capacity <= 0 {
			tb.Errorf("%s: capacity %d", u.Name, u.Capacity)
		}
		out[u.Name] = u.Entries
	}
	return out
}

func members(n, base int) []model.IPSetMember {
	out := make([]model.IPSetMember, n)
	for i := range out {
		out[i] = model.IPSetMember{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(base), byte(i / 256), byte(i % 256)}), 32)}
	}
	return out
}

// TestMapUsageAgreesWithMaps: the fill levels MapUsage reports from what
// the kernel tracks are what the maps hold, through adds and removals, and
// a scrape makes no bpf(2) call but the batched conntrack count, at most
// once per ConntrackCountInterval.
func TestMapUsageAgreesWithMaps(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	watch(t, k)
	sys := testutil.NewBPFSyscalls(t)
	a, b := newWorkload(t, "10.77.9.1"), newWorkload(t, "10.77.9.2")
	testutil.WaitFor(t, 5*time.Second, "both interfaces seen", func() bool {
		_, okA := k.mon.Ifindex(a.HostIface)
		_, okB := k.mon.Ifindex(b.HostIface)
		return okA && okB
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(k.ReplaceIPSet("s1", model.IPSetIP, members(1000, 1)))
	must(k.ReplaceIPSet("s2", model.IPSetIP, members(10, 2)))
	must(k.UpdateIPSet("s1", members(5, 3), members(3, 1)))
	epA := endpointFor(a, 1, bigPolicy(), allowAll())
	epB := endpointFor(b, 2, denyAll(), allowAll())
	must(applyKnown(t, k, epA))
	must(applyKnown(t, k, epB))
	svc := &model.Service{
		Key:        model.ServiceKey{Namespace: "ns", Name: "usage"},
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.77.9")},
		Ports:      []model.ServicePort{{Protocol: model.ProtoTCP, Port: 80}, {Protocol: model.ProtoUDP, Port: 53}},
		Backends: []model.Backend{
			{Addr: netip.MustParseAddr(a.IP), Port: 8080, Protocol: model.ProtoTCP, Ready: true},
			{Addr: netip.MustParseAddr(b.IP), Port: 8080, Protocol: model.ProtoTCP, Ready: true},
			{Addr: netip.MustParseAddr(b.IP), Port: 53, Protocol: model.ProtoUDP, Ready: true},
		},
	}
	must(k.ApplyService(svc))
	local := func(dst string) *model.Route {
		return &model.Route{Dst: netip.MustParsePrefix(dst), Types: abi.RTLocalWorkload, DstNodeName: "here", LocalWorkload: true}
	}
	for _, r := range []string{"10.77.9.1/32", "10.77.9.2/32", "fd00:77::/64"} {
		must(k.ApplyRoute(local(r)))
	}

	check := func(step string) {
		t.Helper()
		k.mu.Lock()
		k.ctCount.at = time.Time{} // count conntrack afresh
		k.mu.Unlock()
		got := usageOf(t, k)
		want := walkAll(t, k)
		for name, n := range want {
			if got[name] != n {
				t.Errorf("%s: MapUsage says %s holds %d entries, the map holds %d", step, name, got[name], n)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: MapUsage reports %d maps, want %d", step, len(got), len(want))
		}
	}
	check("programmed")
	if u := usageOf(t, k); u["dpd_ipsets"] != 1012 || u["dpd_chain"] == 0 || u["dpd_nat_be"] != 3 || u["dpd_routes"] != 2 {
		t.Errorf("usage %v: want 1012 set members, chained chunks, 3 backends, 2 IPv4 routes", u)
	}

	// A scrape costs no bpf(2) call while the conntrack count is fresh, and
	// one batch per 8192 flows, plus one for the fragments, when it is not.
	if n := sys.During(t, func() { usageOf(t, k) }); n != 0 {
		t.Errorf("a scrape with a fresh conntrack count made %d bpf calls, want 0", n)
	}
	k.mu.Lock()
	k.ctCount.at = time.Time{}
	k.mu.Unlock()
	if n := sys.During(t, func() { usageOf(t, k) }); n != 2 {
		t.Errorf("a scrape counting conntrack and fragments (empty) made %d bpf calls, want 2 batches", n)
	}

	must(k.RemoveEndpoint(epB))
	must(k.RemoveIPSet("s2"))
	must(k.RemoveService(svc))
	must(k.RemoveRoute(local("10.77.9.2/32")))
	check("after removals")
}

// BenchmarkMapUsage is one scrape's cost at P3's scale: 100 IP sets of
// 1,000 members, and for 1,000 endpoints their dpd_ifstate entries, jump
// slots, a counter and a route each (written directly: the interfaces are
// not created, so only the walk sees them). "tracked" is MapUsage with a
// fresh conntrack count (most scrapes), "tracked-ct" MapUsage counting
// conntrack, "walk" reads every map as a scrape did before.
func BenchmarkMapUsage(b *testing.B) {
	testutil.RequirePrivileged(b)
	pin := fmt.Sprintf("/sys/fs/bpf/dpd-linux-bench-%d", os.Getpid())
	b.Cleanup(func() { _ = os.RemoveAll(pin) })
	// No conntrack scan among the counted bpf calls.
	k, err := New(Options{PinDir: pin, Log: quietLog(), Flows: FlowOptions{ConntrackScan: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k.Close() })
	for i := range 100 {
		ms := make([]model.IPSetMember, 1000)
		for j := range ms {
			ms[j] = model.IPSetMember{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), byte(j / 256), byte(j % 256)}), 32)}
		}
		if err := k.ReplaceIPSet(fmt.Sprintf("set-%03d", i), model.IPSetIP, ms); err != nil {
			b.Fatal(err)
		}
	}
	d := k.datapath()
	ids := make([]uint64, 1000)
	for i := range 1000 {
		slot := uint32(i)
		if err := d.SetIfState(2_000_000+i, slot, abi.IfReady); err != nil {
			b.Fatal(err)
		}
		for dir := range 2 {
			if err := d.InstallPolicy(slot, dir, d.Programs().Epilogue); err != nil {
				b.Fatal(err)
			}
		}
		ids[i] = uint64(i + 1)
		dst := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 200, byte(i / 256), byte(i % 256)}), 32)
		if err := d.SetRoute(dst, tcbpf.RouteInfo{Flags: abi.RTLocalWorkload}); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.EnsureCounters(ids); err != nil {
		b.Fatal(err)
	}
	if _, err := k.MapUsage(); err != nil { // the one read of the counters an earlier process left
		b.Fatal(err)
	}
	sys := testutil.NewBPFSyscalls(b)
	run := func(name string, scrape func()) {
		b.Run(name, func(b *testing.B) {
			var calls uint64
			for b.Loop() {
				calls += sys.During(b, scrape)
			}
			b.ReportMetric(float64(calls)/float64(b.N), "bpf-calls/op")
		})
	}
	run("tracked", func() {
		if _, err := k.MapUsage(); err != nil {
			b.Fatal(err)
		}
	})
	run("tracked-ct", func() {
		k.mu.Lock()
		k.ctCount.at = time.Time{}
		k.mu.Unlock()
		if _, err := k.MapUsage(); err != nil {
			b.Fatal(err)
		}
	})
	run("walk", func() { walkAll(b, k) })
}
