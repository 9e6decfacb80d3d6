package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// TestIPv4OnlyNode runs dpd on a node whose namespace has IPv6 disabled
// (net.ipv6.conf.all.disable_ipv6=1, set in a namespace of the test's own,
// never on the host). The controller still speaks dual stack (an IPv6
// address on an endpoint, an IPv6 route): dpd must start, enforce IPv4 as
// usual, report the endpoints up with no error, and say exactly once that
// IPv6 programming is off.
func TestIPv4OnlyNode(t *testing.T) {
	testutil.RequirePrivileged(t)
	n := NewNode(t, "v4", "192.0.2.1")
	for _, key := range []string{"net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"} {
		testutil.Run(t, "ip", "netns", "exec", n.Name, "sysctl", "-q", "-w", key+"=1")
	}
	if got := strings.TrimSpace(testutil.Run(t, "ip", "netns", "exec", n.Name, "cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6")); got != "1" {
		t.Fatalf("disable_ipv6 in %s is %q", n.Name, got)
	}
	// A default route, as real nodes have (proxy ARP answers for
	// 169.254.1.1 only with one).
	testutil.Run(t, "ip", "-n", n.Name, "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1")
	testutil.Run(t, "ip", "-n", n.Name, "addr", "add", n.IP+"/24", "dev", "uplink0")
	testutil.Run(t, "ip", "-n", n.Name, "link", "set", "uplink1", "up")
	testutil.Run(t, "ip", "-n", n.Name, "link", "set", "uplink0", "up")
	testutil.Run(t, "ip", "-n", n.Name, "route", "add", "default", "via", "192.0.2.254")
	client, server := n.NewPod(t, "v4c", "10.72.0.10"), n.NewPod(t, "v4s", "10.72.0.11")
	srv := server.Workload()
	srv.Serve(t, []int{tcpPort, tcpOther}, nil)

	d := n.Start(t)
	serverEp := PodEndpoint(server, []string{profAllowAll}, Tier("t1", "Deny", []string{"t1.web"}, nil))
	serverEp.GetWorkloadEndpointUpdate().Endpoint.Ipv6Nets = []string{"fd00:72::11/128"}
	snap := []*felix.ToDataplane{
		ConfigMsg(map[string]string{"FelixHostname": n.Name}),
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Policy("t1", "t1.web", Rules(Allow(Proto("tcp"), DstPorts(Port(tcpPort)))), nil),
		PodEndpoint(client, []string{profAllowAll}),
		serverEp,
		RouteMsg(&felix.RouteUpdate{Dst: "10.72.0.0/26", Types: felix.RouteType_LOCAL_WORKLOAD, LocalWorkload: true, DstNodeName: n.Name}),
		RouteMsg(&felix.RouteUpdate{Dst: "fd00:72::/122", Types: felix.RouteType_LOCAL_WORKLOAD, LocalWorkload: true, DstNodeName: n.Name}),
		// An IPv6 pool with nat_outgoing and another node's IPv6 block:
		// nothing of them is programmed here, and nothing complains.
		RouteMsg(&felix.RouteUpdate{Dst: "fd00:72::/48", Types: felix.RouteType_CIDR_INFO, IpPoolType: felix.IPPoolType_NO_ENCAP, NatOutgoing: true}),
		RouteMsg(&felix.RouteUpdate{Dst: "fd00:72:0:1::/64", Types: felix.RouteType_REMOTE_WORKLOAD, IpPoolType: felix.IPPoolType_NO_ENCAP,
			DstNodeName: "v4-other", DstNodeIp: "fd00:99::2"}),
		RouteMsg(&felix.RouteUpdate{Dst: "10.72.0.0/16", Types: felix.RouteType_CIDR_INFO, IpPoolType: felix.IPPoolType_NO_ENCAP, NatOutgoing: true}),
	}
	c := d.Connect(t, snap)
	c.WaitInSync(t)
	c.WaitStatus(t, "up", client.ID(), server.ID())

	cw := client.Workload()
	Expect(t,
		Allowed(TCP(cw, server.IP, tcpPort)),
		Denied(TCP(cw, server.IP, tcpOther)),
		Allowed(Ping(srv, client.IP)),
	)

	if out, err := tool("ip", "netns", "exec", n.Name, "nft", "list", "table", "ip6", "dpd-nat"); err == nil {
		t.Errorf("an IPv4-only node got an ip6 nat_outgoing table:\n%s", out)
	}
	if out := testutil.Run(t, "ip", "netns", "exec", n.Name, "nft", "list", "table", "ip", "dpd-nat"); !strings.Contains(out, "masquerade") {
		t.Errorf("the IPv4 nat_outgoing table is missing:\n%s", out)
	}
	if out, err := tool("ip", "-n", n.Name, "-6", "route", "show", "proto", "221"); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("IPv6 routes of dpd on an IPv4-only node: %q %v", out, err)
	}

	log, err := os.ReadFile(d.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "IPv6 programming is off"); n != 1 {
		t.Errorf("dpd said %d times that IPv6 programming is off, want once", n)
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") {
			t.Errorf("dpd complained on an IPv4-only node: %s", line)
		}
	}
}
