package tcbpf

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/vishvananda/netlink"
)

// TestWorkloadRedirect: a packet between two workloads of the node goes
// from one host-side interface straight to the other, so the host's IP
// stack (its prerouting and forward hooks) never sees it, and its TTL is
// decremented as forwarding would; with StackForwarding it is routed by
// the stack. Either way a workload sending from an address the node does
// not route back to it is left to the stack, whose rp_filter drops it.
func TestWorkloadRedirect(t *testing.T) {
	testutil.RequirePrivileged(t)
	setSysctl(t, "/proc/sys/net/ipv4/ip_forward", "1")
	for _, viaStack := range []bool{false, true} {
		name := "redirect"
		if viaStack {
			name = "stack"
		}
		t.Run(name, func(t *testing.T) { workloadRedirect(t, viaStack) })
	}
}

func workloadRedirect(t *testing.T, viaStack bool) {
	d := openTest(t, Options{StackForwarding: viaStack})
	const ipA, ipB, spoofed = "10.67.1.1", "10.67.1.2", "10.67.1.99"
	wa, ifA := routedWorkload(t, ipA)
	wb, ifB := routedWorkload(t, ipB)
	for _, w := range []*testutil.Workload{wa, wb} {
		setSysctl(t, "/proc/sys/net/ipv4/conf/"+w.HostIface+"/rp_filter", "1")
	}
	allowBoth(t, d, ifA, wa, ifB, wb)
	table := fmt.Sprintf("dpdt_fwd_%d", os.Getpid())
	host := testutil.HostHooks(t, table, ipA, ipB)
	spoof := testutil.NewNFTCounters(t, "", table+"_spoof", fmt.Sprintf(`
	counter spoofed {}
	chain prerouting {
		type filter hook prerouting priority -300;
		ip saddr %s counter name "spoofed"
	}`, spoofed))
	inB := testutil.NewNFTCounters(t, wb.NS, "dpdt_in", fmt.Sprintf(`
	counter spoofed {}
	chain input {
		type filter hook input priority 0;
		ip saddr %s counter name "spoofed"
	}`, spoofed))
	redirectedHops(t, d, host, wa, wb, ipA, ipB, viaStack)

	// A spoofed source goes to the stack, which drops it; B never sees it.
	testutil.Run(t, "ip", "-n", wa.NS, "addr", "add", spoofed+"/32", "dev", "eth0")
	if out, err := wa.Exec("ping", "-n", "-c", "3", "-i", "0.01", "-W", "1", "-I", spoofed, ipB); err == nil {
		t.Fatalf("ping from a spoofed source got replies:\n%s", out)
	}
	if got := spoof.Packets(t, "spoofed"); got == 0 {
		t.Error("the spoofed packets never reached the host's stack")
	}
	// A legitimate ping after them: once it has arrived, so would they.
	if err := ping(wa, ipB); err != nil {
		t.Fatalf("ping A->B after the spoofed ones: %v", err)
	}
	if got := inB.Packets(t, "spoofed"); got != 0 {
		t.Errorf("B received %d packets from the spoofed source", got)
	}
}

// TestWorkloadRedirect6: the same over IPv6, with the workloads wired as
// Calico's CNI plugin wires IPv6 (a /128 route, the host side's link-local
// address as the gateway); the hop limit is decremented as forwarding
// would.
func TestWorkloadRedirect6(t *testing.T) {
	testutil.RequirePrivileged(t)
	setSysctl(t, "/proc/sys/net/ipv6/conf/all/forwarding", "1")
	for _, viaStack := range []bool{false, true} {
		name := "redirect"
		if viaStack {
			name = "stack"
		}
		t.Run(name, func(t *testing.T) { workloadRedirect6(t, viaStack) })
	}
}

func workloadRedirect6(t *testing.T, viaStack bool) {
	d := openTest(t, Options{StackForwarding: viaStack})
	const ipA, ipB = "fd67:1::1", "fd67:1::2"
	wa, ifA := routedWorkload6(t, "10.67.1.11", ipA)
	wb, ifB := routedWorkload6(t, "10.67.1.12", ipB)
	allowBoth(t, d, ifA, wa, ifB, wb)
	host := testutil.HostHooks(t, fmt.Sprintf("dpdt_fwd6_%d", os.Getpid()), ipA, ipB)
	redirectedHops(t, d, host, wa, wb, ipA, ipB, viaStack)
}

// routedWorkload6 is routedWorkload with IPv6 too: ip6/128 routed to the
// host side, which forwards IPv6.
func routedWorkload6(t *testing.T, ip, ip6 string) (*testutil.Workload, int) {
	t.Helper()
	w := testutil.NewWorkload(t, "dpp", ip)
	// AddIPv6 cycles the host side, which would drop routes through it.
	testutil.AddIPv6(t, w, "", ip6)
	setSysctl(t, "/proc/sys/net/ipv6/conf/"+w.HostIface+"/forwarding", "1")
	testutil.Run(t, "ip", "-6", "route", "add", ip6+"/128", "dev", w.HostIface)
	l, err := netlink.LinkByName(w.HostIface)
	mustNil(t, err)
	return w, l.Attrs().Index
}

// allowBoth attaches d to both workloads' host sides with an allow-all
// policy each way and marks them ready workload interfaces.
func allowBoth(t *testing.T, d *Datapath, ifA int, wa *testutil.Workload, ifB int, wb *testutil.Workload) {
	t.Helper()
	allow := verdictProg(t, d, abi.VerdictAllow, 1)
	mustNil(t, d.EnsureCounters([]uint64{1}))
	for i, w := range []struct {
		ifindex int
		name    string
	}{{ifA, wa.HostIface}, {ifB, wb.HostIface}} {
		if _, err := d.Attach(w.ifindex, w.name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Detach(w.ifindex, w.name) })
		mustNil(t, d.InstallPolicy(uint32(i), abi.DirFromWEP, allow))
		mustNil(t, d.InstallPolicy(uint32(i), abi.DirToWEP, allow))
		mustNil(t, d.SetIfState(w.ifindex, uint32(i), abi.IfReady|abi.IfWorkload))
	}
}

// redirectedHops pings ipB from wa, new flows then established ones, and
// checks that every reply took one hop each way (TTL or hop limit 63) and
// that the host's hooks saw the packets only via the stack.
func redirectedHops(t *testing.T, d *Datapath, host *testutil.NFTCounters, wa, wb *testutil.Workload, ipA, ipB string, viaStack bool) {
	t.Helper()
	// The first packets may wait for the host to learn the workloads'
	// MACs (the redirect needs the neighbour), through the stack.
	testutil.WaitFor(t, 10*time.Second, "ping A->B", func() bool { return ping(wa, ipB) == nil })
	testutil.WaitFor(t, 10*time.Second, "ping B->A", func() bool { return ping(wb, ipA) == nil })

	// New flows (the epilogue's path) and their established packets.
	_, err := d.ScanConntrack(time.Now().Add(2 * time.Hour))
	mustNil(t, err)
	pre0, fwd0 := host.Packets(t, "prerouted"), host.Packets(t, "forwarded")
	const n = 5
	out, err := wa.Exec("ping", "-n", "-c", strconv.Itoa(n), "-i", "0.01", "-W", "1", ipB)
	if err != nil {
		t.Fatalf("ping A->B: %v\n%s", err, out)
	}
	if got := strings.Count(out, "ttl=63"); got != n {
		t.Errorf("want %d replies with ttl=63 (one hop each way), got %d:\n%s", n, got, out)
	}
	pre, fwd := host.Packets(t, "prerouted")-pre0, host.Packets(t, "forwarded")-fwd0
	if viaStack {
		if pre < 2*n || fwd < 2*n {
			t.Errorf("via the stack: the host's hooks saw prerouting %d, forward %d packets of %d requests and replies", pre, fwd, 2*n)
		}
	} else if pre != 0 || fwd != 0 {
		t.Errorf("redirected: the host's hooks saw prerouting %d, forward %d packets, want none", pre, fwd)
	}
}

// TestWorkloadRedirectCache: the outcome of a pair's FIB lookups is kept in
// dpd_fwd_cache and stands for them (a route change does not reach the
// pair's packets while it lives); it never sends a packet to an interface
// that has stopped being a ready workload interface, however long it has
// left; and it expires by itself, so a route change reaches the pair.
func TestWorkloadRedirectCache(t *testing.T) {
	testutil.RequirePrivileged(t)
	setSysctl(t, "/proc/sys/net/ipv4/ip_forward", "1")
	d := openTest(t, Options{})
	const ipA, ipB = "10.67.2.1", "10.67.2.2"
	wa, ifA := routedWorkload(t, ipA)
	wb, ifB := routedWorkload(t, ipB)
	allowBoth(t, d, ifA, wa, ifB, wb)
	// Only A->B: B's replies may take the stack when B's route is gone.
	host := testutil.NewNFTCounters(t, "", fmt.Sprintf("dpdt_fwdc_%d", os.Getpid()), fmt.Sprintf(`
	counter prerouted {}
	chain prerouting {
		type filter hook prerouting priority -300;
		ip saddr %s ip daddr %s counter name "prerouted"
	}`, ipA, ipB))
	testutil.WaitFor(t, 10*time.Second, "ping A->B", func() bool { return ping(wa, ipB) == nil })
	testutil.WaitFor(t, 10*time.Second, "ping B->A", func() bool { return ping(wb, ipA) == nil })
	blackhole := func() {
		testutil.Run(t, "ip", "route", "replace", "blackhole", ipB+"/32")
	}
	restore := func() {
		testutil.Run(t, "ip", "route", "replace", ipB+"/32", "dev", wb.HostIface)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "route", "del", "blackhole", ipB+"/32").Run() })

	// The pair's entries (A's for B, B's for A: its replies' reverse-path
	// check would fail without a route to B), on every CPU, for good: B's
	// route is taken away, and A's packets still reach B, by the entry.
	mustNil(t, ping(wa, ipB))
	spreadFwdCache(t, d, ifA, ifB, math.MaxUint64)
	spreadFwdCache(t, d, ifB, ifA, math.MaxUint64)
	blackhole()
	pre := host.Packets(t, "prerouted")
	if err := ping(wa, ipB); err != nil {
		t.Fatalf("ping A->B by a cached entry after B's route went: %v", err)
	}
	if got := host.Packets(t, "prerouted"); got != pre {
		t.Fatalf("a cached pair's ping reached the host's stack (%d packets)", got-pre)
	}

	// B stops being ready: A's packets to it go to the stack, which drops
	// them (no route), not to B by the entry.
	mustNil(t, d.SetIfState(ifB, 1, abi.IfWorkload))
	if err := ping(wa, ipB); err == nil {
		t.Fatal("ping A->B answered while B is not ready")
	}
	if got := host.Packets(t, "prerouted"); got == pre {
		t.Error("with B not ready, A's packets to it were still redirected by the cache")
	}
	restore()
	mustNil(t, d.SetIfState(ifB, 1, abi.IfReady|abi.IfWorkload))
	clearFwdCache(t, d)
	testutil.WaitFor(t, 10*time.Second, "ping A->B with B ready again", func() bool { return ping(wa, ipB) == nil })

	// A fresh entry on every CPU, with the expiry it was given: once it
	// passes, the route change reaches A's packets.
	spreadFwdCache(t, d, ifA, ifB, 0)
	blackhole()
	pre = host.Packets(t, "prerouted")
	testutil.WaitFor(t, 10*time.Second, "A's packets to B through the stack after the route change", func() bool {
		_ = ping(wa, ipB)
		return host.Packets(t, "prerouted") > pre
	})
}

// spreadFwdCache copies the dpd_fwd_cache entry from ifIn to oif that some
// CPU holds into every CPU's slot, with expires (0: the entry's own), so
// that a packet of the pair hits it on whichever CPU it is processed.
func spreadFwdCache(t *testing.T, d *Datapath, ifIn, oif int, expires uint64) {
	t.Helper()
	for i := range uint32(abi.FwdCacheEntries) {
		var per []bpf.DpdDpdFwdCacheEnt
		mustNil(t, d.objs.DpdFwdCache.Lookup(i, &per))
		c := slices.IndexFunc(per, func(e bpf.DpdDpdFwdCacheEnt) bool {
			return e.Ifindex == uint32(ifIn) && e.Oif == uint32(oif)
		})
		if c < 0 {
			continue
		}
		e := per[c]
		if expires != 0 {
			e.Expires = expires
		}
		for j := range per {
			per[j] = e
		}
		mustNil(t, d.objs.DpdFwdCache.Update(i, per, ebpf.UpdateExist))
		return
	}
	t.Fatalf("no cache entry from interface %d to %d", ifIn, oif)
}

// clearFwdCache empties every CPU's dpd_fwd_cache.
func clearFwdCache(t *testing.T, d *Datapath) {
	t.Helper()
	empty := make([]bpf.DpdDpdFwdCacheEnt, ebpf.MustPossibleCPU())
	for i := range uint32(abi.FwdCacheEntries) {
		mustNil(t, d.objs.DpdFwdCache.Update(i, empty, ebpf.UpdateExist))
	}
}
