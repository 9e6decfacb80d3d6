package linux

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestRoutesIPv6 drives IPv6 pools through the composed kernel in a
// namespace: a remote block of a no-encap pool via the node's IPv6
// address (from dst_node_ip, and from host metadata when it has none),
// the ip6 nat_outgoing table beside the ip one, garbage collection of a
// leftover IPv6 route, and removal.
func TestRoutesIPv6(t *testing.T) {
	ns, peer := enterNewNetns(t)
	testutil.Run(t, "ip", "-n", ns, "-6", "addr", "add", "fd00:77::1/64", "dev", "ul0", "nodad")
	testutil.Run(t, "ip", "-n", peer, "-6", "addr", "add", "fd00:77::2/64", "dev", "ul0", "nodad")
	pin := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpd-linux-rt6-%d", os.Getpid()))
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
	if !k.cfg.IPv6() {
		t.Fatal("a fresh namespace has IPv6, but the configurer says it has not")
	}
	must(k.Configure(map[string]string{ConfigHostname: "node-a"}))
	pool4 := &model.Route{Dst: netip.MustParsePrefix("10.69.0.0/16"), PoolType: poolNoEncap, NATOutgoing: true}
	pool6 := &model.Route{Dst: netip.MustParsePrefix("fd00:69::/48"), PoolType: poolNoEncap, NATOutgoing: true}
	other6 := &model.Route{Dst: netip.MustParsePrefix("fd00:70::/48"), PoolType: poolNoEncap}
	remote := &model.Route{Dst: netip.MustParsePrefix("fd00:69:0:2::/64"), Types: abi.RTRemoteWorkload, PoolType: poolNoEncap,
		DstNodeName: "node-b", DstNodeIP: netip.MustParseAddr("fd00:77::2")}
	local := &model.Route{Dst: netip.MustParsePrefix("fd00:69:0:1::/64"), Types: abi.RTLocalWorkload, PoolType: poolNoEncap,
		DstNodeName: "node-a", LocalWorkload: true}
	// Felix sends the node's IPv4 address as dst_node_ip of IPv6 routes
	// too: the IPv6 next hop then comes from the host metadata.
	viaHost := &model.Route{Dst: netip.MustParsePrefix("fd00:69:0:3::/64"), Types: abi.RTRemoteWorkload, PoolType: poolNoEncap,
		DstNodeName: "node-c", DstNodeIP: netip.MustParseAddr("192.168.77.2")}
	for _, r := range []*model.Route{pool4, pool6, other6, remote, local, viaHost} {
		must(k.ApplyRoute(r))
	}
	show6 := func(dst string) string {
		return strings.TrimSpace(testutil.Run(t, "ip", "-n", ns, "-6", "route", "show", dst))
	}
	if r := show6("fd00:69:0:2::/64"); !strings.Contains(r, "via fd00:77::2") || !strings.Contains(r, "proto 221") {
		t.Fatalf("IPv6 no-encap route: %q", r)
	}
	if r := show6("fd00:69:0:1::/64"); r != "" {
		t.Fatalf("local IPv6 block got a kernel route: %q", r)
	}
	if r := show6("fd00:69:0:3::/64"); r != "" {
		t.Fatalf("IPv6 route before the node's IPv6 address is known: %q", r)
	}
	must(k.ApplyHostMetadata(&model.HostMetadata{Hostname: "node-c", IPv4Addr: netip.MustParseAddr("192.168.77.2"),
		IPv6Addr: netip.MustParseAddr("fd00:77::2")}))
	if r := show6("fd00:69:0:3::/64"); !strings.Contains(r, "via fd00:77::2") {
		t.Fatalf("IPv6 route after host metadata: %q", r)
	}

	must(k.EndApply())
	masq, all, err := k.cfg.MasqueradePools()
	if err != nil || fmt.Sprint(masq) != "[10.69.0.0/16 fd00:69::/48]" || fmt.Sprint(all) != "[10.69.0.0/16 fd00:69::/48 fd00:70::/48]" {
		t.Fatalf("nat outgoing pools %v %v %v", masq, all, err)
	}
	rules := testutil.Run(t, "ip", "netns", "exec", ns, "nft", "list", "table", "ip6", "dpd-nat")
	if !strings.Contains(rules, "ip6 saddr @masq-pools ip6 daddr != @all-pools masquerade fully-random") {
		t.Fatalf("ip6 dpd-nat table:\n%s", rules)
	}

	// A route an earlier dpd left (same protocol, nothing wants it) goes
	// at garbage collection; the wanted ones stay.
	testutil.Run(t, "ip", "-n", ns, "-6", "route", "add", "fd00:69:0:9::/64", "via", "fd00:77::2", "proto", "221")
	must(k.routes.gc())
	if r := show6("fd00:69:0:9::/64"); r != "" {
		t.Fatalf("leftover IPv6 route survived gc: %q", r)
	}
	if r := show6("fd00:69:0:2::/64"); r == "" {
		t.Fatal("gc removed a wanted IPv6 route")
	}

	for _, r := range []*model.Route{remote, viaHost, pool6, other6} {
		must(k.RemoveRoute(r))
	}
	if r := show6("fd00:69:0:2::/64") + show6("fd00:69:0:3::/64"); r != "" {
		t.Fatalf("IPv6 routes left after removal: %q", r)
	}
	must(k.EndApply())
	if masq, all, err := k.cfg.MasqueradePools(); err != nil || fmt.Sprint(masq) != "[10.69.0.0/16]" || fmt.Sprint(all) != "[10.69.0.0/16]" {
		t.Fatalf("nat outgoing pools after the IPv6 pools went: %v %v %v", masq, all, err)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "ip6", "dpd-nat").CombinedOutput(); err == nil {
		t.Fatalf("ip6 dpd-nat table left without an IPv6 pool:\n%s", out)
	}
}

// TestVXLANIPv6 drives a dual-stack VTEP pair: the local VTEP's IPv6
// fields make the IPv6 device (vxlan-v6.calico, over the node's IPv6
// address) beside the IPv4 one, the remote VTEP's become its FDB and
// neighbour entries, an IPv6 VXLAN block routes via the remote VTEP's IPv6
// address onlink, and the device goes when the local VTEP loses IPv6.
func TestVXLANIPv6(t *testing.T) {
	ns, peer := enterNewNetns(t)
	testutil.Run(t, "ip", "-n", ns, "-6", "addr", "add", "fd00:77::1/64", "dev", "ul0", "nodad")
	testutil.Run(t, "ip", "-n", peer, "-6", "addr", "add", "fd00:77::2/64", "dev", "ul0", "nodad")
	pin := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpd-linux-vx6-%d", os.Getpid()))
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
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	vx := &model.Route{Dst: netip.MustParsePrefix("fd00:69:0:4::/64"), Types: abi.RTRemoteWorkload, PoolType: poolVXLAN,
		DstNodeName: "node-d", DstNodeIP: netip.MustParseAddr("192.168.77.2"), TunnelVXLAN: true}
	tunnel := &model.Route{Dst: netip.MustParsePrefix("fd00:69:0:4::1/128"), Types: abi.RTRemoteTunnel, PoolType: poolVXLAN,
		DstNodeName: "node-d", TunnelVXLAN: true}
	must(k.ApplyRoute(vx))
	must(k.ApplyRoute(tunnel))
	remote := &model.VTEP{Node: "node-d", MAC: mac("66:dd:00:00:04:01"),
		IPv4Addr: netip.MustParseAddr("10.69.4.1"), ParentDeviceIP: netip.MustParseAddr("192.168.77.2"),
		MACV6: mac("66:dd:00:00:06:01"), IPv6Addr: netip.MustParseAddr("fd00:69:0:4::1"), ParentDeviceIPv6: netip.MustParseAddr("fd00:77::2")}
	localV := &model.VTEP{Node: "node-a", MAC: mac("66:dd:00:00:01:01"),
		IPv4Addr: netip.MustParseAddr("10.69.1.1"), ParentDeviceIP: netip.MustParseAddr("192.168.77.1"),
		MACV6: mac("66:dd:00:00:06:02"), IPv6Addr: netip.MustParseAddr("fd00:69:0:1::1"), ParentDeviceIPv6: netip.MustParseAddr("fd00:77::1")}
	must(k.ApplyVTEP(remote))
	must(k.ApplyVTEP(localV))
	if k.VXLANIfindex() == 0 {
		t.Fatal("no IPv4 vxlan device beside the IPv6 one")
	}
	// Re-applying the local VTEP keeps the device: what the kernel reports
	// of it (IPv6 local address included) matches what is wanted.
	k.mu.Lock()
	idx6 := k.tunnels.ifindex6
	k.mu.Unlock()
	must(k.ApplyVTEP(localV))
	k.mu.Lock()
	again := k.tunnels.ifindex6
	k.mu.Unlock()
	if idx6 == 0 || again != idx6 {
		t.Fatalf("IPv6 vxlan device ifindex %d, then %d after re-applying the local VTEP: recreated", idx6, again)
	}
	show6 := func(dst string) string {
		return strings.TrimSpace(testutil.Run(t, "ip", "-n", ns, "-6", "route", "show", dst))
	}
	dev := nl.DefaultVXLANDeviceV6
	if r := show6("fd00:69:0:4::/64"); !strings.Contains(r, "via fd00:69:0:4::1 dev "+dev) || !strings.Contains(r, "onlink") || !strings.Contains(r, "proto 221") {
		t.Fatalf("IPv6 vxlan route: %q", r)
	}
	if r := show6("fd00:69:0:4::1"); !strings.Contains(r, "dev "+dev) {
		t.Fatalf("route to the remote IPv6 VTEP: %q", r)
	}
	link := testutil.Run(t, "ip", "-n", ns, "-d", "link", "show", dev)
	if !strings.Contains(link, "vxlan id 4096") || !strings.Contains(link, "local fd00:77::1") || !strings.Contains(link, "66:dd:00:00:06:02") ||
		!strings.Contains(link, fmt.Sprintf("mtu %d", nl.DefaultVXLANMTUV6)) {
		t.Fatalf("IPv6 vxlan device:\n%s", link)
	}
	if addrs := testutil.Run(t, "ip", "-n", ns, "-6", "addr", "show", "dev", dev); !strings.Contains(addrs, "fd00:69:0:1::1/128") {
		t.Fatalf("IPv6 vxlan device addresses:\n%s", addrs)
	}
	neigh := testutil.Run(t, "ip", "-n", ns, "-6", "neigh", "show", "dev", dev)
	fdb := testutil.Run(t, "bridge", "-n", ns, "fdb", "show", "dev", dev)
	if !strings.Contains(neigh, "fd00:69:0:4::1 lladdr 66:dd:00:00:06:01 PERMANENT") || !strings.Contains(fdb, "66:dd:00:00:06:01 dst fd00:77::2") {
		t.Fatalf("IPv6 vxlan entries:\n%s\n%s", neigh, fdb)
	}
	// gc keeps what is wanted on the IPv6 device.
	must(k.routes.gc())
	if r := show6("fd00:69:0:4::1"); r == "" {
		t.Fatal("gc removed the route to the remote IPv6 VTEP")
	}

	// The local VTEP loses IPv6: the IPv6 device and its routes go, the
	// IPv4 device stays.
	v4only := *localV
	v4only.MACV6, v4only.IPv6Addr, v4only.ParentDeviceIPv6 = nil, netip.Addr{}, netip.Addr{}
	must(k.ApplyVTEP(&v4only))
	if _, err := exec.Command("ip", "-n", ns, "link", "show", dev).CombinedOutput(); err == nil {
		t.Fatal("IPv6 vxlan device left after the local VTEP lost IPv6")
	}
	if r := show6("fd00:69:0:4::/64"); r != "" {
		t.Fatalf("IPv6 vxlan route without the device: %q", r)
	}
	if k.VXLANIfindex() == 0 {
		t.Fatal("the IPv4 vxlan device went with the IPv6 one")
	}
	must(k.RemoveVTEP("node-a"))
}
