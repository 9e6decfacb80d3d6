package e2e

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// The dual-stack two-node cluster: the IPv4 cluster of TestMultiNode plus
// an IPv6 pool with one /64 block per node, an IPv6 underlay, and an IPv6
// "internet" behind node A without a route back to the pool.
const (
	mn6Pool     = "fd00:70::/48"
	mn6InetIP   = "fd00:203::2"
	mn6InetGW   = "fd00:203::1"
	mn6VXLANDev = "vxlan-v6.calico"
)

// mn6Node is a dual-stack node of the test cluster.
type mn6Node struct {
	*Node
	ip6, block6, vtep6, vtepMAC6 string
	pod                          *Pod
	pod6                         string // the pod's IPv6 address
	c                            *Controller
}

// mn6Routes is what the calc graph sends a node about the IPv6 pool: the
// pool, each node's block and, for VXLAN, each remote node's IPv6 tunnel
// address.
func mn6Routes(self *mn6Node, all []*mn6Node, pool felix.IPPoolType, natOut bool) []*felix.ToDataplane {
	var nodes []poolNode
	for _, n := range all {
		nodes = append(nodes, poolNode{name: n.Name, block: n.block6, ip: n.ip6, vtep: n.vtep6 + "/128", self: n == self})
	}
	return poolRoutes(mn6Pool, nodes, pool, natOut)
}

// dualPodEndpoint is PodEndpoint with the pod's IPv6 address too.
func dualPodEndpoint(p *Pod, ip6 string, profiles []string, tiers ...*felix.TierInfo) *felix.ToDataplane {
	m := PodEndpoint(p, profiles, tiers...)
	m.GetWorkloadEndpointUpdate().Endpoint.Ipv6Nets = []string{ip6 + "/128"}
	return m
}

// TestMultiNodeIPv6 runs two dual-stack nodes and judges IPv6 traffic
// between their pods by connections: no-encap routes via the node's IPv6
// address, policy on IPv6 (IPv4 unaffected), VXLAN over the IPv6 underlay
// through vxlan-v6.calico, and nat_outgoing for the IPv6 pool (ip6
// dpd-nat).
func TestMultiNodeIPv6(t *testing.T) {
	testutil.RequirePrivileged(t)
	a := &mn6Node{Node: NewNode(t, "a6", "192.168.101.1"), ip6: "fd00:101::1", block6: "fd00:70:0:1::/64",
		vtep6: "fd00:70:0:1::1", vtepMAC6: "66:dd:00:00:61:01", pod6: "fd00:70:0:1::10"}
	b := &mn6Node{Node: NewNode(t, "b6", "192.168.101.2"), ip6: "fd00:101::2", block6: "fd00:70:0:2::/64",
		vtep6: "fd00:70:0:2::1", vtepMAC6: "66:dd:00:00:62:01", pod6: "fd00:70:0:2::10"}
	nodes := []*mn6Node{a, b}
	Link(t, a.Name, a.IP, b.Name, b.IP, "ul0")
	inet := NewNode(t, "i6", "203.0.114.2")
	testutil.Run(t, "ip", "-n", a.Name, "link", "add", "inet0", "type", "veth", "peer", "name", "inet0", "netns", inet.Name)
	for _, s := range [][2]string{{a.Name, mn6InetGW}, {inet.Name, mn6InetIP}} {
		testutil.Run(t, "ip", "-n", s[0], "-6", "addr", "add", s[1]+"/64", "dev", "inet0", "nodad")
		testutil.Run(t, "ip", "-n", s[0], "link", "set", "inet0", "up")
	}
	for _, n := range nodes {
		testutil.Run(t, "ip", "-n", n.Name, "-6", "addr", "add", n.ip6+"/64", "dev", "ul0", "nodad")
	}
	testutil.Run(t, "ip", "-n", b.Name, "-6", "route", "add", "default", "via", a.ip6)
	// IPv4 default routes, without which proxy ARP does not answer the
	// pods for 169.254.1.1 (IPv6 needs none: the gateway is the host
	// side's own address).
	testutil.Run(t, "ip", "-n", a.Name, "route", "add", "default", "via", b.IP)
	testutil.Run(t, "ip", "-n", b.Name, "route", "add", "default", "via", a.IP)
	for i, n := range nodes {
		n.pod = n.NewPod(t, fmt.Sprintf("q%d", i), fmt.Sprintf("10.71.%d.10", i+1))
		testutil.AddIPv6(t, &testutil.Workload{NS: n.pod.NS, HostIface: n.pod.HostIface}, n.Name, n.pod6)
		testutil.ServeName(t, n.pod.NS, mnPort, n.pod.Name)
	}
	testutil.ServePeer(t, inet.Name, mnPort)

	vteps := func() []*felix.ToDataplane {
		var msgs []*felix.ToDataplane
		for i, o := range nodes {
			msgs = append(msgs, &felix.ToDataplane{Payload: &felix.ToDataplane_VtepUpdate{VtepUpdate: &felix.VXLANTunnelEndpointUpdate{
				Node: o.Name, Mac: fmt.Sprintf("66:dd:00:00:0%d:01", i+1), Ipv4Addr: fmt.Sprintf("10.71.%d.1", i+1), ParentDeviceIp: o.IP,
				MacV6: o.vtepMAC6, Ipv6Addr: o.vtep6, ParentDeviceIpv6: o.ip6,
			}}})
		}
		return msgs
	}
	for _, n := range nodes {
		n.Start(t)
		snap := []*felix.ToDataplane{
			ConfigMsg(map[string]string{"FelixHostname": n.Name}),
			Profile(mnAllowProf, Rules(Allow()), Rules(Allow())),
			dualPodEndpoint(n.pod, n.pod6, []string{mnAllowProf}),
		}
		for _, o := range nodes {
			snap = append(snap, &felix.ToDataplane{Payload: &felix.ToDataplane_HostMetadataUpdate{HostMetadataUpdate: &felix.HostMetadataUpdate{
				Hostname: o.Name, Ipv4Addr: o.IP, Ipv6Addr: o.ip6}}})
		}
		snap = append(snap, mn6Routes(n, nodes, felix.IPPoolType_NO_ENCAP, false)...)
		n.c = n.D.Connect(t, snap)
		n.c.WaitInSync(t)
		n.c.WaitStatus(t, "up", n.pod.ID())
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range nodes {
			for _, args := range [][]string{{"-6", "route"}, {"-6", "neigh"}, {"-d", "link"}} {
				out, err := tool("ip", append([]string{"-n", n.Name}, args...)...)
				t.Logf("node %s: ip %s (%v):\n%s", n.Name, strings.Join(args, " "), err, out)
			}
		}
	})
	pa, pb := a.pod.Workload(), b.pod.Workload()
	port := strconv.Itoa(mnPort)
	toB, toA := net.JoinHostPort(b.pod6, port), net.JoinHostPort(a.pod6, port)

	t.Run("no-encap", func(t *testing.T) {
		eventuallyAnswers(t, pa, "tcp6", toB, b.pod.Name)
		eventuallyAnswers(t, pb, "tcp6", toA, a.pod.Name)
		eventuallyAnswers(t, pa, "udp6", toB, b.pod.Name)
		r := strings.TrimSpace(testutil.Run(t, "ip", "-n", a.Name, "-6", "route", "show", b.block6))
		if !strings.Contains(r, "via "+b.ip6) || !strings.Contains(r, "proto 221") {
			t.Fatalf("node a's route to %s: %q, want via %s proto 221", b.block6, r, b.ip6)
		}
	})

	t.Run("policy", func(t *testing.T) {
		// b refuses a's pod over IPv6 only: IPv4 between the pods still
		// answers.
		deny := Policy("default", "mn6-deny-in", Rules(Deny(SrcNet(a.pod6+"/128")), Allow()), nil)
		b.c.Send(t, deny, dualPodEndpoint(b.pod, b.pod6, []string{mnAllowProf}, Tier("default", "", []string{"mn6-deny-in"}, nil)))
		eventuallyBlocked(t, pa, "tcp6", toB)
		b.c.Send(t, RouteMsg(&felix.RouteUpdate{Dst: "10.71.2.0/26", Types: felix.RouteType_LOCAL_WORKLOAD, LocalWorkload: true,
			IpPoolType: felix.IPPoolType_NO_ENCAP, DstNodeName: b.Name}))
		a.c.Send(t, RouteMsg(&felix.RouteUpdate{Dst: "10.71.2.0/26", Types: felix.RouteType_REMOTE_WORKLOAD,
			IpPoolType: felix.IPPoolType_NO_ENCAP, DstNodeName: b.Name, DstNodeIp: b.IP}))
		b.c.Send(t, RouteMsg(&felix.RouteUpdate{Dst: "10.71.1.0/26", Types: felix.RouteType_REMOTE_WORKLOAD,
			IpPoolType: felix.IPPoolType_NO_ENCAP, DstNodeName: a.Name, DstNodeIp: a.IP}))
		eventuallyAnswers(t, pa, "tcp4", net.JoinHostPort(b.pod.IP, port), b.pod.Name)
		b.c.Send(t, dualPodEndpoint(b.pod, b.pod6, []string{mnAllowProf}), PolicyRemove(PolicyID("mn6-deny-in")))
		eventuallyAnswers(t, pa, "tcp6", toB, b.pod.Name)
	})

	t.Run("vxlan", func(t *testing.T) {
		for _, n := range nodes {
			n.c.Send(t, append(vteps(), mn6Routes(n, nodes, felix.IPPoolType_VXLAN, false)...)...)
		}
		for _, n := range nodes {
			for _, o := range nodes {
				if o == n {
					continue
				}
				testutil.WaitFor(t, svcTimeout, fmt.Sprintf("node %s routes %s through %s", n.Name, o.block6, mn6VXLANDev), func() bool {
					r, _ := tool("ip", "-n", n.Name, "-6", "route", "show", o.block6)
					return strings.Contains(string(r), "via "+o.vtep6+" dev "+mn6VXLANDev)
				})
			}
		}
		before := txPackets(t, a.Name, mn6VXLANDev)
		eventuallyAnswers(t, pa, "tcp6", toB, b.pod.Name)
		eventuallyAnswers(t, pb, "tcp6", toA, a.pod.Name)
		if after := txPackets(t, a.Name, mn6VXLANDev); after <= before {
			t.Fatalf("%s on node a sent no packets (%d -> %d): traffic did not use the tunnel", mn6VXLANDev, before, after)
		}
	})

	t.Run("nat-outgoing", func(t *testing.T) {
		toInet := net.JoinHostPort(mn6InetIP, port)
		eventuallyBlocked(t, pa, "tcp6", toInet)
		a.c.Send(t, mn6Routes(a, nodes, felix.IPPoolType_VXLAN, true)...)
		eventuallyAnswers(t, pa, "tcp6", toInet, mn6InetGW)
		// Between pods no masquerade: b sees a's pod address.
		testutil.ServePeer(t, b.pod.NS, mnPort+1)
		eventuallyAnswers(t, pa, "tcp6", net.JoinHostPort(b.pod6, strconv.Itoa(mnPort+1)), a.pod6)
		a.c.Send(t, mn6Routes(a, nodes, felix.IPPoolType_VXLAN, false)...)
		eventuallyBlocked(t, pa, "tcp6", toInet)
	})
}
