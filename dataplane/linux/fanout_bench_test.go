package linux

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// BenchmarkPolicyFanOut: DPD_FANOUT_N (default 1000) workload interfaces
// share one ingress policy; each iteration changes that policy and applies
// every endpoint again as the engine's apply pass does (PreloadPolicies,
// then ApplyEndpoint one at a time, then EndApply). The sub-benchmarks
// alternate, on the same interfaces, endpoints with slots of their own
// (group=false) and one policy group sharing a slot (group=true).
// Reported: the pass's time and the kernel operations per endpoint.
// DPD_FANOUT_CPUPROFILE names a file for a CPU profile of the passes
// after the set-up. Run with -bench PolicyFanOut -benchtime 20x.
func BenchmarkPolicyFanOut(b *testing.B) {
	n := 1000
	if s := os.Getenv("DPD_FANOUT_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		n = v
	}
	testutil.RequirePrivileged(b)
	pin := arrivalPinDir(b)
	k, err := New(Options{PinDir: pin, Log: quietLog(), Flows: FlowOptions{ConntrackScan: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = k.Close() }()
	prefix := fmt.Sprintf("df%d", os.Getpid()%100000)
	if err := k.Configure(map[string]string{"InterfacePrefix": prefix}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = k.WatchLinks(ctx, func(model.LinkUpdate) {})
	}()
	defer func() {
		cancel()
		<-watched
	}()
	var names []string
	defer func() {
		for _, name := range names {
			if l, err := netlink.LinkByName(name); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
	}()
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		peer := fmt.Sprintf("dg%d-%d", os.Getpid()%100000, i)
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
			b.Fatal(err)
		}
		names = append(names, name)
		for _, l := range []string{name, peer} {
			if err := netlink.LinkSetUp(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	testutil.WaitFor(b, time.Minute, "the monitor knows every interface", func() bool {
		for _, name := range names {
			if k.Link(name) != model.LinkUp {
				return false
			}
		}
		return true
	})
	eps := make([]*model.Endpoint, n)
	for i, name := range names {
		eps[i] = &model.Endpoint{
			ID:       model.WorkloadID{Orchestrator: "k8s", Workload: fmt.Sprintf("ns/fan%d", i), Endpoint: "eth0"},
			Iface:    name,
			IPv4Nets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 78, byte(i >> 8), byte(i)}), 32)},
			IPv6Nets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x78, 14: byte(i >> 8), 15: byte(i)}), 128)},
			Ingress:  fanOutPolicy(0), Egress: allowAll().WithDigest(),
		}
	}
	var phases [3]time.Duration // preload, applies, EndApply
	round := 0
	pass := func(group string) time.Duration {
		round++
		in := fanOutPolicy(round)
		next := make([]*model.Endpoint, n)
		for i, ep := range eps {
			c := *ep
			c.Ingress, c.PolicyGroup = in, group
			next[i] = &c
		}
		start := time.Now()
		k.PreloadPolicies(next)
		t1 := time.Now()
		for _, ep := range next {
			if err := k.ApplyEndpoint(ep); err != nil {
				b.Fatalf("apply %s: %v", ep.Iface, err)
			}
		}
		t2 := time.Now()
		if err := k.EndApply(); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		phases[0] += t1.Sub(start)
		phases[1] += t2.Sub(t1)
		phases[2] += d - t2.Sub(start)
		eps = next
		return d
	}
	pass("") // attach and program everything

	if f := os.Getenv("DPD_FANOUT_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = out.Close()
		}()
	}
	// Own slots (no group) against one policy group, interleaved: each
	// variant's first pass (moving the endpoints between slots) is not
	// timed.
	for r := range 3 {
		for _, group := range []string{"", "shared"} {
			b.Run(fmt.Sprintf("group=%v/r=%d", group != "", r), func(b *testing.B) {
				pass(group)
				phases = [3]time.Duration{}
				before := k.Ops()
				var total time.Duration
				b.ResetTimer()
				for range b.N {
					total += pass(group)
				}
				b.StopTimer()
				d := k.Ops().Sub(before)
				per := func(v uint64) float64 { return float64(v) / float64(b.N) / float64(n) }
				b.ReportMetric(float64(total)/float64(b.N)/float64(time.Millisecond), "pass-ms")
				b.ReportMetric(per(d.JumpWrites), "jump-writes/ep")
				b.ReportMetric(per(d.IfStateWrites), "ifstate-writes/ep")
				b.ReportMetric(per(d.Netlink.Writes()+d.Netlink.RouteDumps+d.Netlink.NeighbourDumps+d.Netlink.SysctlReads), "netlink/ep")
				b.ReportMetric(float64(d.ProgramLoads)/float64(b.N), "loads/pass")
				b.Logf("n=%d: per pass: preload %s, applies %s, EndApply %s", n, phases[0]/time.Duration(b.N), phases[1]/time.Duration(b.N), phases[2]/time.Duration(b.N))
			})
		}
	}
}

// fanOutPolicy is the shared ingress policy of round r: it denies TCP to
// port 1000+r, then allows everything.
func fanOutPolicy(r int) model.DirectionPolicy {
	tcp := uint8(6)
	p := uint16(1000 + r)
	return model.DirectionPolicy{Tiers: []model.Tier{{Name: "t", DefaultAction: model.ActionDeny,
		Policies: []model.PolicyRules{{Name: "t/shared", Kind: "policy", Rules: []model.Rule{
			{Action: model.ActionDeny, Protocol: &tcp, DstPorts: []model.PortRange{{First: p, Last: p}}},
			{Action: model.ActionAllow},
		}}}}}}.WithDigest()
}
