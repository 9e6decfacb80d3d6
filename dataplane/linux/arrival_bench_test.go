package linux

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// BenchmarkEndpointArrival: DPD_ARRIVAL_N (default 100) workload
// interfaces appear at once while the kernel watches links, and an
// engine-like loop applies each endpoint as soon as the monitor reports
// its interface, one at a time as the engine does. Reported: the time
// from the first interface's creation until every endpoint is up, the
// per-endpoint time from its interface's report to its apply returning
// (p50, p99), and the time to remove every endpoint afterwards. Run with
// -bench EndpointArrival -benchtime 1x.
func BenchmarkEndpointArrival(b *testing.B) {
	n := 100
	if s := os.Getenv("DPD_ARRIVAL_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	for _, mode := range []string{"tcx", "tc"} {
		b.Run(fmt.Sprintf("mode=%s/n=%d", mode, n), func(b *testing.B) {
			for range b.N {
				arrival(b, mode, n)
			}
		})
	}
}

func arrival(b *testing.B, mode string, n int) {
	testutil.RequirePrivileged(b)
	pin := arrivalPinDir(b)
	k, err := New(Options{PinDir: pin, AttachMode: mode, Log: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = k.Close() }()
	prefix := fmt.Sprintf("da%d", os.Getpid()%100000)
	if err := k.Configure(map[string]string{"InterfacePrefix": prefix}); err != nil {
		b.Fatal(err)
	}
	eps := map[string]*model.Endpoint{}
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i)
		names = append(names, name)
		eps[name] = &model.Endpoint{
			ID:       model.WorkloadID{Orchestrator: "k8s", Workload: fmt.Sprintf("ns/arr%d", i), Endpoint: "eth0"},
			Iface:    name,
			IPv4Nets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 79, byte(i >> 8), byte(i)}), 32)},
			Ingress:  allowAll(), Egress: allowAll(),
		}
	}
	defer func() {
		for _, name := range names {
			if l, err := netlink.LinkByName(name); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
	}()

	var mu sync.Mutex
	seen := map[string]time.Time{}
	reports := make(chan string, 16*n)
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = k.WatchLinks(ctx, func(u model.LinkUpdate) {
			if u.State != model.LinkUp {
				return
			}
			mu.Lock()
			if _, ok := seen[u.Name]; !ok && eps[u.Name] != nil {
				seen[u.Name] = time.Now()
			}
			mu.Unlock()
			select {
			case reports <- u.Name:
			default:
			}
		})
	}()
	defer func() {
		cancel()
		<-watched
	}()
	// The first apply after InSync has ended: interfaces that appear now
	// are fresh, as in steady state.
	if err := k.EndApply(); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	start := time.Now()
	for i, name := range names {
		peer := fmt.Sprintf("dq%d-%d", os.Getpid()%100000, i)
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
			b.Fatal(err)
		}
		for _, l := range []string{name, peer} {
			if err := netlink.LinkSetUp(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	created := time.Since(start)
	up := map[string]time.Time{}
	deadline := time.After(5 * time.Minute)
	for len(up) < n {
		select {
		case name := <-reports:
			if _, done := up[name]; done || eps[name] == nil || k.Link(name) != model.LinkUp {
				continue
			}
			if err := k.ApplyEndpoint(eps[name]); err != nil {
				b.Fatalf("apply %s: %v", name, err)
			}
			up[name] = time.Now()
		case <-deadline:
			b.Fatalf("only %d of %d endpoints up", len(up), n)
		}
	}
	allUp := time.Since(start)
	attaches := k.Ops().Attaches
	oc := k.datapath().ObservedCosts()
	var lat []time.Duration
	mu.Lock()
	for name, t := range up {
		lat = append(lat, t.Sub(seen[name]))
	}
	mu.Unlock()
	slices.Sort(lat)

	before := k.Ops()
	rstart := time.Now()
	for _, name := range names {
		if err := k.RemoveEndpoint(eps[name]); err != nil {
			b.Fatal(err)
		}
	}
	removal := time.Since(rstart)
	b.StopTimer()
	d := k.Ops().Sub(before)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(allUp), "all-up-ms")
	b.ReportMetric(ms(created), "create-ms")
	b.ReportMetric(ms(lat[len(lat)/2]), "up-p50-ms")
	b.ReportMetric(ms(lat[(len(lat)*99)/100]), "up-p99-ms")
	b.ReportMetric(ms(removal), "remove-all-ms")
	b.ReportMetric(float64(d.Detaches), "removal-detaches")
	b.ReportMetric(float64(attaches), "attaches")
	b.Logf("observed: tcx attach mean %s (%d), tc attach mean %s (%d)", oc.TCXAttach.Mean().Round(time.Microsecond), oc.TCXAttach.Count,
		oc.TCAttach.Mean().Round(time.Microsecond), oc.TCAttach.Count)
	b.Logf("%s n=%d: created in %s, all up %s after the first creation (%d attaches); report->up p50 %s p99 %s; removal of all %s (%d detaches)",
		mode, n, created.Round(time.Millisecond), allUp.Round(time.Millisecond), attaches, lat[len(lat)/2].Round(time.Microsecond),
		lat[(len(lat)*99)/100].Round(time.Microsecond), removal.Round(time.Millisecond), d.Detaches)
}

// arrivalPinDir is a fresh pin directory for b, removed at the end.
func arrivalPinDir(b *testing.B) string {
	pin := fmt.Sprintf("/sys/fs/bpf/dpd-linux-arrival-%d-%d", os.Getpid(), pinSeq.Add(1))
	b.Cleanup(func() { _ = os.RemoveAll(pin) })
	return pin
}
