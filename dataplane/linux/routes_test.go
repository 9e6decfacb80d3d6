package linux

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// enterNewNetns moves the test goroutine, locked to its thread, into a
// fresh named namespace linked to a peer namespace by a veth (192.168.77.1
// here, .2 there), and moves it back at cleanup. Everything the test then
// creates (netlink handles, sysctls, nftables) is inside the namespace.
func enterNewNetns(t *testing.T) (self, peer string) {
	t.Helper()
	testutil.RequirePrivileged(t)
	self = fmt.Sprintf("dpdlx%d", os.Getpid()%100000)
	peer = self + "p"
	for _, ns := range []string{self, peer} {
		testutil.Run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		testutil.Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	testutil.Run(t, "ip", "-n", self, "link", "add", "ul0", "type", "veth", "peer", "name", "ul0", "netns", peer)
	for i, ns := range []string{self, peer} {
		testutil.Run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("192.168.77.%d/24", i+1), "dev", "ul0")
		testutil.Run(t, "ip", "-n", ns, "link", "set", "ul0", "up")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.GetFromName(self)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = netns.Set(orig)
		_ = orig.Close()
		_ = h.Close()
		runtime.UnlockOSThread()
	})
	if err := netns.Set(h); err != nil {
		t.Fatal(err)
	}
	return self, peer
}

func routeShow(t *testing.T, ns, dst string) string {
	t.Helper()
	return strings.TrimSpace(testutil.Run(t, "ip", "-n", ns, "route", "show", dst))
}

// TestRoutesAndTunnel drives routes, VTEPs and host metadata through the
// composed kernel in a namespace and checks the kernel and BPF state.
func TestRoutesAndTunnel(t *testing.T) {
	ns, _ := enterNewNetns(t)
	pin := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpd-linux-rt-%d", os.Getpid()))
	t.Cleanup(func() { _ = os.RemoveAll(pin) })
	k, err := New(Options{PinDir: pin, Hostname: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(k.Configure(map[string]string{ConfigHostname: "node-a"}))

	pool := &model.Route{Dst: netip.MustParsePrefix("10.69.0.0/16"), PoolType: poolNoEncap, NATOutgoing: true}
	noEncap := &model.Route{Dst: netip.MustParsePrefix("10.69.2.0/26"), Types: abi.RTRemoteWorkload, PoolType: poolNoEncap,
		DstNodeName: "node-b", DstNodeIP: netip.MustParseAddr("192.168.77.2")}
	local := &model.Route{Dst: netip.MustParsePrefix("10.69.1.0/26"), Types: abi.RTLocalWorkload, PoolType: poolNoEncap,
		DstNodeName: "node-a", LocalWorkload: true}
	for _, r := range []*model.Route{pool, noEncap, local} {
		must(k.ApplyRoute(r))
	}
	if r := routeShow(t, ns, "10.69.2.0/26"); !strings.Contains(r, "via 192.168.77.2") || !strings.Contains(r, "proto 221") {
		t.Fatalf("no-encap route: %q", r)
	}
	if r := routeShow(t, ns, "10.69.1.0/26"); r != "" {
		t.Fatalf("local block got a kernel route: %q", r)
	}
	info, ok, err := k.datapath().LookupRoute(netip.MustParseAddr("10.69.2.5"))
	if err != nil || !ok || info.Flags != abi.RTRemoteWorkload|abi.RTInPool || info.NextHop.String() != "192.168.77.2" {
		t.Fatalf("bpf route of a remote workload: %+v %v %v", info, ok, err)
	}
	must(k.EndApply())
	masq, all, err := k.cfg.MasqueradePools()
	if err != nil || fmt.Sprint(masq) != "[10.69.0.0/16]" || fmt.Sprint(all) != "[10.69.0.0/16]" {
		t.Fatalf("nat outgoing pools %v %v %v", masq, all, err)
	}

	// A route without dst_node_ip waits for the node's host metadata.
	viaHost := &model.Route{Dst: netip.MustParsePrefix("10.69.3.0/26"), Types: abi.RTRemoteWorkload, PoolType: poolNoEncap, DstNodeName: "node-c"}
	must(k.ApplyRoute(viaHost))
	if r := routeShow(t, ns, "10.69.3.0/26"); r != "" {
		t.Fatalf("route before the node's address is known: %q", r)
	}
	must(k.ApplyHostMetadata(&model.HostMetadata{Hostname: "node-c", IPv4Addr: netip.MustParseAddr("192.168.77.2")}))
	if r := routeShow(t, ns, "10.69.3.0/26"); !strings.Contains(r, "via 192.168.77.2") {
		t.Fatalf("route after host metadata: %q", r)
	}
	must(k.RemoveHostMetadata("node-c"))
	if r := routeShow(t, ns, "10.69.3.0/26"); r != "" {
		t.Fatalf("route after host metadata removal: %q", r)
	}

	// VXLAN: the route needs both the local VTEP (the device) and the
	// remote one, in either order.
	vx := &model.Route{Dst: netip.MustParsePrefix("10.69.4.0/26"), Types: abi.RTRemoteWorkload, PoolType: poolVXLAN,
		DstNodeName: "node-d", DstNodeIP: netip.MustParseAddr("192.168.77.2"), TunnelVXLAN: true}
	must(k.ApplyRoute(vx))
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	must(k.ApplyVTEP(&model.VTEP{Node: "node-d", MAC: mac("66:dd:00:00:04:01"),
		IPv4Addr: netip.MustParseAddr("10.69.4.1"), ParentDeviceIP: netip.MustParseAddr("192.168.77.2")}))
	if r := routeShow(t, ns, "10.69.4.0/26"); r != "" {
		t.Fatalf("vxlan route without a local VTEP: %q", r)
	}
	must(k.ApplyVTEP(&model.VTEP{Node: "node-a", MAC: mac("66:dd:00:00:01:01"),
		IPv4Addr: netip.MustParseAddr("10.69.1.1"), ParentDeviceIP: netip.MustParseAddr("192.168.77.1")}))
	if k.VXLANIfindex() == 0 {
		t.Fatal("no vxlan device after the local VTEP")
	}
	if r := routeShow(t, ns, "10.69.4.0/26"); !strings.Contains(r, "via 10.69.4.1 dev "+nl.DefaultVXLANDevice) || !strings.Contains(r, "onlink") {
		t.Fatalf("vxlan route: %q", r)
	}
	neigh := testutil.Run(t, "ip", "-n", ns, "neigh", "show", "dev", nl.DefaultVXLANDevice)
	fdb := testutil.Run(t, "bridge", "-n", ns, "fdb", "show", "dev", nl.DefaultVXLANDevice)
	if !strings.Contains(neigh, "10.69.4.1 lladdr 66:dd:00:00:04:01 PERMANENT") || !strings.Contains(fdb, "66:dd:00:00:04:01 dst 192.168.77.2") {
		t.Fatalf("vxlan entries:\n%s\n%s", neigh, fdb)
	}
	must(k.RemoveVTEP("node-d"))
	if r := routeShow(t, ns, "10.69.4.0/26"); r != "" {
		t.Fatalf("vxlan route after its VTEP left: %q", r)
	}
	must(k.RemoveVTEP("node-a"))
	if _, err := net.InterfaceByName(nl.DefaultVXLANDevice); err == nil {
		t.Fatal("vxlan device left after the local VTEP was removed")
	}

	must(k.RemoveRoute(noEncap))
	if r := routeShow(t, ns, "10.69.2.0/26"); r != "" {
		t.Fatalf("route after RemoveRoute: %q", r)
	}
	for _, r := range []*model.Route{pool, local, viaHost, vx} {
		must(k.RemoveRoute(r))
	}
	must(k.EndApply())
	if masq, all, err := k.cfg.MasqueradePools(); err != nil || masq != nil || all != nil {
		t.Fatalf("nat outgoing table left without pools: %v %v %v", masq, all, err)
	}
}
