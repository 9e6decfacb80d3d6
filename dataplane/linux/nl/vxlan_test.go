package nl

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// namedNetns creates a network namespace for the test, deleted at cleanup.
func namedNetns(t testing.TB, kind string) string {
	t.Helper()
	testutil.RequirePrivileged(t)
	name := fmt.Sprintf("dpdnl%s%d-%d", kind, os.Getpid()%100000, linkSeq.Add(1))
	testutil.Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	testutil.Run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// inNetns runs fn on a thread switched into ns. Netlink handles created
// there stay bound to ns afterwards, from any thread.
func inNetns(t testing.TB, ns string, fn func()) {
	t.Helper()
	if err := testutil.InNetns(ns, func() error { fn(); return nil }); err != nil {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

func configurerIn(t testing.TB, ns string) *Configurer {
	t.Helper()
	var c *Configurer
	inNetns(t, ns, func() {
		var err error
		if c, err = NewConfigurer(Config{}); err != nil {
			t.Errorf("configurer in %s: %v", ns, err)
		}
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// underlay joins two namespaces with a veth: a gets 192.168.77.1/24, b .2.
func underlay(t *testing.T, a, b string) {
	t.Helper()
	testutil.Run(t, "ip", "-n", a, "link", "add", "ul0", "type", "veth", "peer", "name", "ul0", "netns", b)
	for i, ns := range []string{a, b} {
		testutil.Run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("192.168.77.%d/24", i+1), "dev", "ul0")
		testutil.Run(t, "ip", "-n", ns, "link", "set", "ul0", "up")
	}
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// TestVXLANTunnel builds the tunnel between two namespaces the way two
// nodes' dpd would, checks the device and entries, that reapplying writes
// nothing, and that packets cross it.
func TestVXLANTunnel(t *testing.T) {
	nsA, nsB := namedNetns(t, "a"), namedNetns(t, "b")
	underlay(t, nsA, nsB)
	ca, cb := configurerIn(t, nsA), configurerIn(t, nsB)
	devA := VXLANDevice{Name: DefaultVXLANDevice, VNI: DefaultVXLANVNI, Port: DefaultVXLANPort, MTU: DefaultVXLANMTU,
		MAC: mustMAC("66:dd:00:00:00:01"), Addr: netip.MustParseAddr("10.70.1.0"), ParentIP: netip.MustParseAddr("192.168.77.1")}
	devB := VXLANDevice{Name: DefaultVXLANDevice, VNI: DefaultVXLANVNI, Port: DefaultVXLANPort, MTU: DefaultVXLANMTU,
		MAC: mustMAC("66:dd:00:00:00:02"), Addr: netip.MustParseAddr("10.70.2.0"), ParentIP: netip.MustParseAddr("192.168.77.2")}
	peerOf := func(d VXLANDevice) VXLANPeer { return VXLANPeer{MAC: d.MAC, TunnelIP: d.Addr, ParentIP: d.ParentIP} }

	program := func(c *Configurer, self, other VXLANDevice) int {
		idx, err := c.EnsureVXLAN(self)
		if err != nil {
			t.Fatalf("ensure vxlan: %v", err)
		}
		if err := c.SyncVXLANPeers(idx, []VXLANPeer{peerOf(other)}); err != nil {
			t.Fatalf("sync peers: %v", err)
		}
		// The peer's VTEP address straight onto the device, and its block
		// through the VTEP, as Felix's VXLAN routes are.
		for _, r := range []RemoteRoute{
			{Dst: netip.PrefixFrom(other.Addr, 32), Ifindex: idx},
			{Dst: netip.PrefixFrom(other.Addr, 26).Masked(), Gateway: other.Addr, Ifindex: idx},
		} {
			if err := c.ReplaceRemoteRoute(r); err != nil {
				t.Fatalf("route %s: %v", r.Dst, err)
			}
		}
		return idx
	}
	idxA := program(ca, devA, devB)
	program(cb, devB, devA)

	l := nsLink(t, nsA, DefaultVXLANDevice)
	vx, ok := l.(*netlink.Vxlan)
	if !ok || vx.VxlanId != DefaultVXLANVNI || vx.Port != DefaultVXLANPort || vx.Learning ||
		vx.MTU != DefaultVXLANMTU || vx.HardwareAddr.String() != devA.MAC.String() || !vx.SrcAddr.Equal(devA.ParentIP.AsSlice()) {
		t.Fatalf("device %+v", l)
	}
	peers, err := ca.VXLANPeers(idxA)
	if err != nil || len(peers) != 1 || peers[0].ParentIP != devB.ParentIP || peers[0].TunnelIP != devB.Addr {
		t.Fatalf("peers %+v %v", peers, err)
	}

	// Re-applying the same state writes no entries (routes are always
	// replaced; see ReplaceRemoteRoute).
	before := ca.Stats()
	program(ca, devA, devB)
	if d := ca.Stats().Sub(before); d.Writes() != d.RouteWrites() {
		t.Fatalf("reapply wrote %+v", d)
	}

	// Packets cross: A pings B's VTEP address from its own.
	testutil.Run(t, "ip", "netns", "exec", nsA, "ping", "-c1", "-W2", "-I", devA.Addr.String(), devB.Addr.String())

	// Drift is repaired: a changed MTU comes back; a changed VNI means a new device.
	testutil.Run(t, "ip", "-n", nsA, "link", "set", DefaultVXLANDevice, "mtu", "1300")
	program(ca, devA, devB)
	if got := nsLink(t, nsA, DefaultVXLANDevice).Attrs().MTU; got != DefaultVXLANMTU {
		t.Fatalf("mtu %d not repaired", got)
	}
	devA.VNI = 4097
	if _, err := ca.EnsureVXLAN(devA); err != nil {
		t.Fatal(err)
	}
	if vx := nsLink(t, nsA, DefaultVXLANDevice).(*netlink.Vxlan); vx.VxlanId != 4097 {
		t.Fatalf("vni %d after change", vx.VxlanId)
	}

	// The peer leaves: its entries and routes go.
	idxA, _ = ca.EnsureVXLAN(devA)
	if err := ca.SyncVXLANPeers(idxA, nil); err != nil {
		t.Fatal(err)
	}
	if peers, _ := ca.VXLANPeers(idxA); len(peers) != 0 {
		t.Fatalf("peers left: %+v", peers)
	}
	if err := ca.DeleteVXLAN(DefaultVXLANDevice); err != nil {
		t.Fatal(err)
	}
	if err := ca.DeleteVXLAN(DefaultVXLANDevice); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}

// TestRemoteRoutes: no-encap routes via a node address, replaced and
// deleted without touching a workload route to the same destination.
func TestRemoteRoutes(t *testing.T) {
	nsA, nsB := namedNetns(t, "a"), namedNetns(t, "b")
	underlay(t, nsA, nsB)
	c := configurerIn(t, nsA)
	dst := netip.MustParsePrefix("10.70.2.0/26")
	r := RemoteRoute{Dst: dst, Gateway: netip.MustParseAddr("192.168.77.2")}
	for range 2 {
		if err := c.ReplaceRemoteRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.RemoteRoutes(0)
	if err != nil || len(got) != 1 || got[0].Gw.String() != "192.168.77.2" || got[0].Protocol != RouteProtocol {
		t.Fatalf("remote routes %+v %v", got, err)
	}
	// A dpd workload route (no gateway) is not a remote route.
	ul := nsLink(t, nsA, "ul0")
	wl := &netlink.Route{LinkIndex: ul.Attrs().Index, Dst: ipNet(netip.MustParsePrefix("10.70.9.9/32")),
		Scope: netlink.SCOPE_LINK, Protocol: RouteProtocol}
	if err := c.h.RouteAdd(wl); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.RemoteRoutes(0); len(got) != 1 {
		t.Fatalf("workload route listed as remote: %+v", got)
	}
	// Deleting a remote route to the workload route's destination leaves
	// the workload route; deleting the real one twice is fine.
	if err := c.DeleteRemoteRoute(RemoteRoute{Dst: netip.MustParsePrefix("10.70.9.9/32"), Gateway: r.Gateway}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.DeleteRemoteRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	all, err := c.ListDpdRoutes()
	if err != nil || len(all) != 1 || all[0].Gw != nil {
		t.Fatalf("after deletes want only the workload route, got %+v %v", all, err)
	}
}

// TestMasquerade programs, reads back and removes the nat_outgoing table.
func TestMasquerade(t *testing.T) {
	ns := namedNetns(t, "m")
	c := configurerIn(t, ns)
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	var masq, all []netip.Prefix
	var err error
	inNetns(t, ns, func() {
		// Overlapping and adjacent prefixes must merge, not fail.
		if err = c.SyncMasquerade(pfx("10.65.0.0/16", "10.65.1.0/26"), pfx("10.65.0.0/16", "10.66.0.0/16", "10.67.0.0/16")); err != nil {
			return
		}
		if masq, all, err = c.MasqueradePools(); err != nil {
			return
		}
		// A second sync replaces the table atomically.
		if err = c.SyncMasquerade(pfx("10.65.0.0/16"), pfx("10.65.0.0/16")); err != nil {
			return
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(masq) != "[10.65.0.0/16]" || fmt.Sprint(all) != "[10.65.0.0/16 10.66.0.0/15]" {
		t.Fatalf("read back masq %v all %v", masq, all)
	}
	inNetns(t, ns, func() {
		if err = c.DeleteMasquerade(); err != nil {
			return
		}
		masq, all, err = c.MasqueradePools()
	})
	if err != nil || masq != nil || all != nil {
		t.Fatalf("after delete: %v %v %v", masq, all, err)
	}
}

func TestIPv4Ranges(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{[]string{"10.0.0.0/8", "10.1.0.0/16"}, "[10.0.0.0/8]"},
		{[]string{"10.1.0.0/16", "10.0.0.0/16"}, "[10.0.0.0/15]"},
		{[]string{"0.0.0.0/0"}, "[0.0.0.0/0]"},
		{[]string{"192.168.0.5/32", "192.168.0.6/31"}, "[192.168.0.5/32 192.168.0.6/31]"},
		{[]string{"fd00::/8"}, "[]"},
	}
	for _, tc := range tests {
		var ps []netip.Prefix
		for _, s := range tc.in {
			ps = append(ps, netip.MustParsePrefix(s))
		}
		if got := fmt.Sprint(prefixesOfElements(rangeElements(ipv4Ranges(ps)))); got != tc.want {
			t.Errorf("%v: got %s, want %s", tc.in, got, tc.want)
		}
	}
}
