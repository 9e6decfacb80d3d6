package linux

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
