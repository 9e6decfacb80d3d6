package nl

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/internal/testutil"
)

func host(ip string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(ip + "/32")} }

func ifindexOf(t *testing.T, name string) int {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("look up %s: %v", name, err)
	}
	return l.Attrs().Index
}

// dpdRoutesVia lists dpd routes through ifindex, as the kernel has them.
func dpdRoutesVia(t *testing.T, ifindex int) []netlink.Route {
	t.Helper()
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{LinkIndex: ifindex, Protocol: RouteProtocol},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatalf("list routes: %v", err)
	}
	return rs
}

// permanentNeigh returns the permanent neighbour entry for ip on ifindex.
func permanentNeigh(t *testing.T, ifindex int, ip string) *netlink.Neigh {
	t.Helper()
	ns, err := netlink.NeighList(ifindex, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("list neighbours: %v", err)
	}
	for i := range ns {
		if ns[i].IP.String() == ip && isPermanent(&ns[i]) {
			return &ns[i]
		}
	}
	return nil
}

func readSysctl(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + rel)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sysctlsToWrite counts the endpoint settings whose current value differs
// (kernel defaults for new interfaces vary with host configuration).
func sysctlsToWrite(t *testing.T, iface string) uint64 {
	t.Helper()
	var n uint64
	for _, s := range endpointSysctls(iface, DefaultRPFilter, false) {
		b, err := os.ReadFile("/proc/sys/" + s.path)
		if err == nil && strings.TrimSpace(string(b)) != s.value {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no endpoint sysctl of %s differs: the first-apply check would prove nothing", iface)
	}
	return n
}

func ping(w *testutil.Workload, ip string) error {
	out, err := w.Exec("ping", "-c", "1", "-W", "1", ip)
	if err != nil {
		return errors.New(strings.TrimSpace(out))
	}
	return nil
}

// TestEndpointPing routes real packets between two workloads through the
// host with nothing but what ConfigureHost/ConfigureEndpoint program, then
// removes it all again.
func TestEndpointPing(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := newConfigurer(t)
	if err := c.ConfigureHost(); err != nil {
		t.Fatalf("configure host: %v", err)
	}
	if v := readSysctl(t, "net/ipv4/ip_forward"); v != "1" {
		t.Fatalf("ip_forward = %s", v)
	}
	ip1, ip2 := testIPs(1), testIPs(2)
	w1 := testutil.NewWorkload(t, "cali", ip1)
	w2 := testutil.NewWorkload(t, "cali", ip2)

	// Before configuration the host neither answers for 169.254.1.1 nor
	// knows where the workloads are.
	if err := ping(w1, ip2); err == nil {
		t.Fatal("ping succeeded before the endpoints were configured")
	}

	for _, w := range []*testutil.Workload{w1, w2} {
		if err := c.ConfigureEndpoint(w.HostIface, 0, workloadMAC(t, w), host(w.IP)); err != nil {
			t.Fatalf("configure %s: %v", w.HostIface, err)
		}
		idx := ifindexOf(t, w.HostIface)
		rs := dpdRoutesVia(t, idx)
		if len(rs) != 1 || rs[0].Dst.String() != w.IP+"/32" || rs[0].Scope != netlink.SCOPE_LINK {
			t.Fatalf("routes via %s: %v", w.HostIface, rs)
		}
		n := permanentNeigh(t, idx, w.IP)
		if n == nil || n.HardwareAddr.String() != workloadMAC(t, w).String() {
			t.Fatalf("neighbour for %s on %s: %+v", w.IP, w.HostIface, n)
		}
		for rel, want := range map[string]string{
			"net/ipv4/conf/" + w.HostIface + "/proxy_arp":    "1",
			"net/ipv4/neigh/" + w.HostIface + "/proxy_delay": "0",
			"net/ipv4/conf/" + w.HostIface + "/forwarding":   "1",
			"net/ipv4/conf/" + w.HostIface + "/rp_filter":    "1",
		} {
			if got := readSysctl(t, rel); got != want {
				t.Fatalf("%s = %s, want %s", rel, got, want)
			}
		}
	}
	testutil.WaitFor(t, deadline, "ping w1 -> w2 through the host", func() bool { return ping(w1, ip2) == nil })
	if err := ping(w2, ip1); err != nil {
		t.Fatalf("ping w2 -> w1: %v", err)
	}

	before := c.Stats()
	for _, w := range []*testutil.Workload{w1, w2} {
		if err := c.UnconfigureEndpoint(w.HostIface, host(w.IP)); err != nil {
			t.Fatalf("unconfigure %s: %v", w.HostIface, err)
		}
		idx := ifindexOf(t, w.HostIface)
		if rs := dpdRoutesVia(t, idx); len(rs) != 0 {
			t.Fatalf("routes left via %s: %v", w.HostIface, rs)
		}
		if n := permanentNeigh(t, idx, w.IP); n != nil {
			t.Fatalf("neighbour left on %s: %+v", w.HostIface, n)
		}
	}
	if d := c.Stats().Sub(before); d.RoutesDeleted != 2 || d.NeighboursDeleted != 2 {
		t.Fatalf("unconfigure made %+v, want 2 route and 2 neighbour deletes", d)
	}
	if err := ping(w1, ip2); err == nil {
		t.Fatal("ping still succeeds after unconfigure")
	}
}

// TestEndpointIdempotence counts kernel writes per sync: unchanged state
// costs reads only; each kind of drift costs exactly its repair.
func TestEndpointIdempotence(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := newConfigurer(t)
	ipA, ipB := testIPs(11), testIPs(12)
	w := testutil.NewWorkload(t, "cali", ipA)
	idx := ifindexOf(t, w.HostIface)
	mac := workloadMAC(t, w)
	both := append(host(ipA), host(ipB)...)
	otherMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x42}

	steps := []struct {
		name  string
		drift func()
		mac   net.HardwareAddr
		nets  []netip.Prefix
		want  Stats // write counters only
	}{
		{name: "first apply", mac: mac, nets: host(ipA),
			want: Stats{RoutesAdded: 1, NeighboursSet: 1, SysctlWrites: sysctlsToWrite(t, w.HostIface)}},
		{name: "unchanged", mac: mac, nets: host(ipA)},
		{name: "unchanged again", mac: mac, nets: host(ipA)},
		{name: "route deleted behind our back", mac: mac, nets: host(ipA),
			drift: func() { testutil.Run(t, "ip", "route", "del", ipA+"/32", "dev", w.HostIface) },
			want:  Stats{RoutesAdded: 1}},
		{name: "route changed behind our back", mac: mac, nets: host(ipA),
			drift: func() {
				testutil.Run(t, "ip", "route", "replace", ipA+"/32", "dev", w.HostIface, "proto", "static")
			},
			want: Stats{RoutesReplaced: 1}},
		{name: "sysctl changed behind our back", mac: mac, nets: host(ipA),
			drift: func() { testutil.Run(t, "sysctl", "-qw", "net.ipv4.conf."+w.HostIface+".proxy_arp=0") },
			want:  Stats{SysctlWrites: 1}},
		{name: "second address", mac: mac, nets: both, want: Stats{RoutesAdded: 1, NeighboursSet: 1}},
		{name: "first address removed", mac: mac, nets: host(ipB),
			want: Stats{RoutesDeleted: 1, NeighboursDeleted: 1}},
		{name: "MAC changed", mac: otherMAC, nets: host(ipB), want: Stats{NeighboursSet: 1}},
		{name: "MAC unknown", mac: nil, nets: host(ipB), want: Stats{NeighboursDeleted: 1}},
		{name: "unchanged at the end", mac: nil, nets: host(ipB)},
	}
	for _, s := range steps {
		if s.drift != nil {
			s.drift()
		}
		before := c.Stats()
		if err := c.ConfigureEndpoint(w.HostIface, idx, s.mac, s.nets); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		d := c.Stats().Sub(before)
		reads := d.RouteDumps > 0 && d.NeighbourDumps > 0 && d.SysctlReads > 0
		d.RouteDumps, d.NeighbourDumps, d.SysctlReads = 0, 0, 0
		if d != s.want || !reads {
			t.Fatalf("%s: operations %+v (reads %v), want %+v", s.name, d, reads, s.want)
		}
	}
	if rs := dpdRoutesVia(t, idx); len(rs) != 1 || rs[0].Dst.String() != ipB+"/32" {
		t.Fatalf("final routes %v, want only %s", rs, ipB)
	}
}

// TestEndpointAbsentLink: configuring a missing interface says ErrNoLink;
// unconfiguring it is a no-op.
func TestEndpointAbsentLink(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := newConfigurer(t)
	name := uniqueName(testPrefix("nla"))
	if err := c.ConfigureEndpoint(name, 0, nil, host(testIPs(20))); !errors.Is(err, ErrNoLink) {
		t.Fatalf("configure absent link: %v, want ErrNoLink", err)
	}
	if err := c.UnconfigureEndpoint(name, host(testIPs(20))); err != nil {
		t.Fatalf("unconfigure absent link: %v", err)
	}
	// A stale ifindex (the link was deleted) is reported the same way.
	l := addLink(t, name)
	idx := l.Attrs().Index
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigureEndpoint(name, idx, nil, host(testIPs(20))); !errors.Is(err, ErrNoLink) {
		t.Fatalf("configure deleted link: %v, want ErrNoLink", err)
	}
	if w := c.Stats().Writes(); w != 0 {
		t.Fatalf("%d writes for absent links", w)
	}
}
