package nl

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestIPv6RPF: with the source check in place, a workload's IPv6 packets
// from its own address pass and those from an address the node does not
// route to it are dropped (and counted); without the table nothing is
// checked; an IPv4-only configurer writes no table.
func TestIPv6RPF(t *testing.T) {
	ns := namedNetns(t, "rpf")
	wns := ns + "w"
	testutil.Run(t, "ip", "netns", "add", wns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", wns).Run() })
	c := configurerIn(t, ns)
	const iface, own, spoofed, target = "calirpf0", "fd00:66::1", "fd00:66::99", "fd00:67::1"
	w := &testutil.Workload{NS: wns, HostIface: iface}
	testutil.Run(t, "ip", "-n", ns, "link", "add", iface, "type", "veth", "peer", "name", "eth0", "netns", wns)
	testutil.Run(t, "ip", "-n", wns, "link", "set", "eth0", "up")
	testutil.AddIPv6(t, w, ns, own)
	testutil.Run(t, "ip", "-n", wns, "-6", "addr", "add", spoofed+"/128", "dev", "eth0", "nodad")
	testutil.Run(t, "ip", "-n", ns, "-6", "addr", "add", target+"/128", "dev", "lo")
	testutil.Run(t, "ip", "-n", ns, "-6", "route", "add", own+"/128", "dev", iface)
	ping := func(src string) bool {
		return exec.Command("ip", "netns", "exec", wns, "ping", "-n", "-c1", "-W1", "-I", src, target).Run() == nil
	}
	drops := func() uint64 {
		var n uint64
		var err error
		inNetns(t, ns, func() { n, err = c.IPv6RPFDrops() })
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var err error
	inNetns(t, ns, func() { err = c.SyncIPv6RPF([]string{"tap", "cali"}) })
	if err != nil {
		t.Fatal(err)
	}
	rules := testutil.Run(t, "ip", "netns", "exec", ns, "nft", "list", "table", "ip6", RPFTable)
	if !strings.Contains(rules, `iifname "cali*"`) || !strings.Contains(rules, `iifname "tap*"`) || !strings.Contains(rules, "fib saddr . iif oif") {
		t.Fatalf("ip6 %s:\n%s", RPFTable, rules)
	}
	testutil.WaitFor(t, deadline, "the workload pings from its own address", func() bool { return ping(own) })
	if n := drops(); n != 0 {
		t.Fatalf("%d packets from the workload's own address dropped", n)
	}
	if ping(spoofed) {
		t.Fatal("a ping from an address not routed to the workload was answered")
	}
	if n := drops(); n == 0 {
		t.Fatal("the spoofed packet was not dropped by the source check")
	}

	// Without prefixes (and so on a node where the check is off) the
	// table goes.
	inNetns(t, ns, func() { err = c.SyncIPv6RPF(nil) })
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "ip6", RPFTable).CombinedOutput(); err == nil {
		t.Fatalf("table left without prefixes:\n%s", out)
	}
	c.ipv6 = false
	inNetns(t, ns, func() { err = c.SyncIPv6RPF([]string{"cali"}) })
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "ip6", RPFTable).CombinedOutput(); err == nil {
		t.Fatalf("an IPv4-only configurer wrote the table:\n%s", out)
	}
}
