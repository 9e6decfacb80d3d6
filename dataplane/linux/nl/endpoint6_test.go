package nl

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// testIP6s is a per-process workload IPv6 address.
func testIP6s(host int) string {
	return fmt.Sprintf("fd00:65:%x::%d", 100+os.Getpid()%150, host)
}

func dualNets(ip4, ip6 string) []netip.Prefix {
	return []netip.Prefix{netip.MustParsePrefix(ip4 + "/32"), netip.MustParsePrefix(ip6 + "/128")}
}

// dpdRoutes6Via lists dpd's IPv6 routes through ifindex, as the kernel has
// them.
func dpdRoutes6Via(t *testing.T, ifindex int) []netlink.Route {
	t.Helper()
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V6,
		&netlink.Route{LinkIndex: ifindex, Protocol: RouteProtocol},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatalf("list routes: %v", err)
	}
	return rs
}

// permanentNeigh6 returns the permanent IPv6 neighbour entry for ip on
// ifindex, nil if none.
func permanentNeigh6(t *testing.T, ifindex int, ip string) *netlink.Neigh {
	t.Helper()
	ns, err := netlink.NeighList(ifindex, netlink.FAMILY_V6)
	if err != nil {
		t.Fatalf("list neighbours: %v", err)
	}
	for i := range ns {
		if ns[i].IP.Equal(netip.MustParseAddr(ip).AsSlice()) && isPermanent(&ns[i]) {
			return &ns[i]
		}
	}
	return nil
}

// hasAddr6 reports whether iface holds addr.
func hasAddr6(t *testing.T, iface, addr string) bool {
	t.Helper()
	l, err := netlink.LinkByName(iface)
	if err != nil {
		t.Fatalf("look up %s: %v", iface, err)
	}
	as, err := netlink.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		t.Fatalf("addresses of %s: %v", iface, err)
	}
	for _, a := range as {
		if a.IP.String() == addr {
			return true
		}
	}
	return false
}

func ping6(w *testutil.Workload, ip string) error { return ping(w, ip) }

// TestEndpointDualStack programs two dual-stack workloads wired like
// Calico's CNI plugin (host side MAC ee:ee:ee:ee:ee:ee, IPv6 default route
// via its link-local address) and checks, in the kernel: the /128 routes
// and permanent neighbours, the IPv6 sysctls (IPv6 was disabled on the
// host side first: dpd turns it on, which gives the interface the
// gateway's link-local address), IPv6 packets between the workloads
// through the host, a steady-state resync that writes nothing, dropping
// the IPv6 net, and unconfiguring.
func TestEndpointDualStack(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := newConfigurer(t)
	if !c.IPv6() {
		testutil.CannotRun(t, "IPv6 test", "this host has no IPv6")
	}
	if err := c.ConfigureHost(); err != nil {
		t.Fatalf("configure host: %v", err)
	}
	if v := readSysctl(t, "net/ipv6/conf/all/forwarding"); v != "1" {
		t.Fatalf("net.ipv6.conf.all.forwarding = %s after ConfigureHost", v)
	}
	ws := []*testutil.Workload{
		testutil.NewWorkload(t, "cali", testIPs(11)),
		testutil.NewWorkload(t, "cali", testIPs(12)),
	}
	ip6 := []string{testIP6s(11), testIP6s(12)}
	for i, w := range ws {
		testutil.AddIPv6(t, w, "", ip6[i])
		testutil.Run(t, "sysctl", "-q", "-w", "net.ipv6.conf."+w.HostIface+".disable_ipv6=1")
	}
	if err := ping6(ws[0], ip6[1]); err == nil {
		t.Fatal("IPv6 ping succeeded before the endpoints were configured")
	}
	for i, w := range ws {
		if err := c.ConfigureEndpoint(w.HostIface, 0, workloadMAC(t, w), dualNets(w.IP, ip6[i])); err != nil {
			t.Fatalf("configure %s: %v", w.HostIface, err)
		}
		idx := ifindexOf(t, w.HostIface)
		rs := dpdRoutes6Via(t, idx)
		if len(rs) != 1 || rs[0].Dst.String() != ip6[i]+"/128" || rs[0].Priority != IPv6RouteMetric || rs[0].Gw != nil {
			t.Fatalf("IPv6 routes via %s: %v", w.HostIface, rs)
		}
		if rs := dpdRoutesVia(t, idx); len(rs) != 1 || rs[0].Dst.String() != w.IP+"/32" {
			t.Fatalf("IPv4 routes via %s: %v", w.HostIface, rs)
		}
		if n := permanentNeigh6(t, idx, ip6[i]); n == nil || n.HardwareAddr.String() != workloadMAC(t, w).String() {
			t.Fatalf("IPv6 neighbour for %s on %s: %+v", ip6[i], w.HostIface, n)
		}
		for rel, want := range map[string]string{
			"net/ipv6/conf/" + w.HostIface + "/disable_ipv6": "0",
			"net/ipv6/conf/" + w.HostIface + "/forwarding":   "1",
			"net/ipv6/conf/" + w.HostIface + "/proxy_ndp":    "1",
			"net/ipv6/conf/" + w.HostIface + "/accept_ra":    "0",
		} {
			if got := readSysctl(t, rel); got != want {
				t.Fatalf("%s = %s, want %s", rel, got, want)
			}
		}
		testutil.WaitFor(t, deadline, w.HostIface+" has the gateway's link-local address", func() bool {
			return hasAddr6(t, w.HostIface, testutil.GatewayV6)
		})
	}
	// The gateway answers neighbour solicitation once its address is past
	// duplicate address detection.
	testutil.WaitFor(t, deadline, "IPv6 ping w1 -> w2 through the host", func() bool { return ping6(ws[0], ip6[1]) == nil })
	if err := ping6(ws[1], ip6[0]); err != nil {
		t.Fatalf("IPv6 ping w2 -> w1: %v", err)
	}
	if err := ping(ws[0], ws[1].IP); err != nil {
		t.Fatalf("IPv4 ping w1 -> w2 of a dual-stack endpoint: %v", err)
	}

	// Steady state: a resync reads and writes nothing.
	before := c.Stats()
	for i, w := range ws {
		if err := c.ConfigureEndpoint(w.HostIface, 0, workloadMAC(t, w), dualNets(w.IP, ip6[i])); err != nil {
			t.Fatalf("reconfigure %s: %v", w.HostIface, err)
		}
	}
	if d := c.Stats().Sub(before); d.Writes() != 0 || d.RouteDumps != 2 || d.NeighbourDumps != 2 {
		t.Fatalf("a steady-state resync of 2 endpoints: %+v, want no writes and one route and one "+
			"neighbour dump per endpoint for both families", d)
	}

	// The IPv6 net goes: its route and neighbour go, IPv4 stays.
	w := ws[0]
	idx := ifindexOf(t, w.HostIface)
	if err := c.ConfigureEndpoint(w.HostIface, 0, workloadMAC(t, w), host(w.IP)); err != nil {
		t.Fatalf("configure %s without IPv6: %v", w.HostIface, err)
	}
	if rs := dpdRoutes6Via(t, idx); len(rs) != 0 {
		t.Fatalf("IPv6 routes left via %s: %v", w.HostIface, rs)
	}
	if n := permanentNeigh6(t, idx, ip6[0]); n != nil {
		t.Fatalf("IPv6 neighbour left on %s: %+v", w.HostIface, n)
	}
	if rs := dpdRoutesVia(t, idx); len(rs) != 1 {
		t.Fatalf("IPv4 routes via %s: %v", w.HostIface, rs)
	}

	// Unconfigure takes both families.
	w = ws[1]
	idx = ifindexOf(t, w.HostIface)
	if err := c.UnconfigureEndpoint(w.HostIface, dualNets(w.IP, ip6[1])); err != nil {
		t.Fatalf("unconfigure %s: %v", w.HostIface, err)
	}
	if rs := append(dpdRoutes6Via(t, idx), dpdRoutesVia(t, idx)...); len(rs) != 0 {
		t.Fatalf("routes left via %s: %v", w.HostIface, rs)
	}
	if n := permanentNeigh6(t, idx, ip6[1]); n != nil {
		t.Fatalf("IPv6 neighbour left on %s: %+v", w.HostIface, n)
	}
}

// TestNewEndpointDualStack checks the write-only path: the same kernel
// state as ConfigureEndpoint, a constant number of writes, and garbage
// collection's listing sees the IPv6 route.
func TestNewEndpointDualStack(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := newConfigurer(t)
	if !c.IPv6() {
		testutil.CannotRun(t, "IPv6 test", "this host has no IPv6")
	}
	w := testutil.NewWorkload(t, "cali", testIPs(13))
	ip6 := testIP6s(13)
	testutil.AddIPv6(t, w, "", ip6)
	before := c.Stats()
	if err := c.ConfigureNewEndpoint(w.HostIface, 0, workloadMAC(t, w), dualNets(w.IP, ip6)); err != nil {
		t.Fatalf("configure new %s: %v", w.HostIface, err)
	}
	d := c.Stats().Sub(before)
	// 4 IPv4 sysctls and accept_ra, 3 IPv6 ones; a route and a neighbour
	// per family.
	if d.SysctlWrites != 8 || d.RoutesAdded != 2 || d.NeighboursSet != 2 || d.RouteDumps+d.NeighbourDumps+d.SysctlReads != 0 {
		t.Fatalf("ConfigureNewEndpoint operations: %+v", d)
	}
	idx := ifindexOf(t, w.HostIface)
	if rs := dpdRoutes6Via(t, idx); len(rs) != 1 || rs[0].Dst.String() != ip6+"/128" {
		t.Fatalf("IPv6 routes via %s: %v", w.HostIface, rs)
	}
	if n := permanentNeigh6(t, idx, ip6); n == nil {
		t.Fatalf("no IPv6 neighbour for %s on %s", ip6, w.HostIface)
	}
	// What ConfigureNewEndpoint wrote is what ConfigureEndpoint wants.
	before = c.Stats()
	if err := c.ConfigureEndpoint(w.HostIface, 0, workloadMAC(t, w), dualNets(w.IP, ip6)); err != nil {
		t.Fatalf("configure %s: %v", w.HostIface, err)
	}
	if d := c.Stats().Sub(before); d.Writes() != 0 {
		t.Fatalf("ConfigureEndpoint after ConfigureNewEndpoint wrote: %+v", d)
	}
	all, err := c.ListDpdRoutes()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range all {
		found = found || (r.LinkIndex == idx && r.Dst != nil && r.Dst.String() == ip6+"/128")
	}
	if !found {
		t.Fatalf("ListDpdRoutes does not list %s/128 via %s", ip6, w.HostIface)
	}
}

// TestEndpointIPv6Off: a Configurer on a node without IPv6 ignores IPv6
// nets entirely (no route, neighbour or IPv6 sysctl) and programs IPv4.
func TestEndpointIPv6Off(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := newConfigurer(t)
	c.ipv6 = false // as IPv6State says on an IPv4-only node
	w := testutil.NewWorkload(t, "cali", testIPs(14))
	ip6 := testIP6s(14)
	testutil.Run(t, "sysctl", "-q", "-w", "net.ipv6.conf."+w.HostIface+".proxy_ndp=0")
	if err := c.ConfigureEndpoint(w.HostIface, 0, workloadMAC(t, w), dualNets(w.IP, ip6)); err != nil {
		t.Fatalf("configure %s: %v", w.HostIface, err)
	}
	idx := ifindexOf(t, w.HostIface)
	if rs := dpdRoutes6Via(t, idx); len(rs) != 0 {
		t.Fatalf("IPv6 routes via %s on an IPv4-only configurer: %v", w.HostIface, rs)
	}
	if n := permanentNeigh6(t, idx, ip6); n != nil {
		t.Fatalf("IPv6 neighbour on an IPv4-only configurer: %+v", n)
	}
	if v := readSysctl(t, "net/ipv6/conf/"+w.HostIface+"/proxy_ndp"); v != "0" {
		t.Fatalf("proxy_ndp written on an IPv4-only configurer: %s", v)
	}
	if rs := dpdRoutesVia(t, idx); len(rs) != 1 {
		t.Fatalf("IPv4 routes via %s: %v", w.HostIface, rs)
	}
}
