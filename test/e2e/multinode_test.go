package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// The two-node cluster: pool 10.70.0.0/16, one block per node, nodes on an
// underlay /24, and an "internet" namespace behind node A that has no route
// back to the pool (so only masqueraded traffic gets answers).
const (
	mnPool      = "10.70.0.0/16"
	mnPort      = 8080
	mnInetIP    = "203.0.113.2"
	mnInetGW    = "203.0.113.1" // node A's address towards the internet
	mnVXLANDev  = "vxlan.calico"
	mnAllowProf = "mn-allow-all"
)

// mnNode is a node of the test cluster and what the others know of it.
type mnNode struct {
	*Node
	block, vtepIP, vtepMAC string
	pod                    *Pod
	c                      *Controller
}

// routes is what the calc graph would send a node about the pool: the
// pool itself, each node's block (local or remote) and, for VXLAN, each
// remote node's tunnel address.
func mnRoutes(self *mnNode, all []*mnNode, pool felix.IPPoolType, natOut bool) []*felix.ToDataplane {
	var nodes []poolNode
	for _, n := range all {
		nodes = append(nodes, poolNode{name: n.Name, block: n.block, ip: n.IP, vtep: n.vtepIP + "/32", self: n == self})
	}
	return poolRoutes(mnPool, nodes, pool, natOut)
}

// poolNode is what a pool's routes say of one node; vtep is its tunnel
// address as a host prefix.
type poolNode struct {
	name, block, ip, vtep string
	self                  bool
}

// poolRoutes is the calc graph's routes of one pool (either family) to the
// node marked self.
func poolRoutes(poolCIDR string, nodes []poolNode, pool felix.IPPoolType, natOut bool) []*felix.ToDataplane {
	vxlan := &felix.TunnelType{Vxlan: pool == felix.IPPoolType_VXLAN}
	msgs := []*felix.ToDataplane{RouteMsg(&felix.RouteUpdate{
		Dst: poolCIDR, Types: felix.RouteType_CIDR_INFO, IpPoolType: pool, NatOutgoing: natOut,
	})}
	for _, n := range nodes {
		r := &felix.RouteUpdate{
			Dst: n.block, IpPoolType: pool, NatOutgoing: natOut, DstNodeName: n.name, DstNodeIp: n.ip, TunnelType: vxlan,
			Types: felix.RouteType_REMOTE_WORKLOAD,
		}
		if n.self {
			r.Types, r.LocalWorkload = felix.RouteType_LOCAL_WORKLOAD, true
		}
		msgs = append(msgs, RouteMsg(r))
		if pool == felix.IPPoolType_VXLAN && !n.self {
			msgs = append(msgs, RouteMsg(&felix.RouteUpdate{
				Dst: n.vtep, IpPoolType: pool, DstNodeName: n.name, DstNodeIp: n.ip, TunnelType: vxlan,
				Types: felix.RouteType_REMOTE_TUNNEL,
			}))
		}
	}
	return msgs
}

// kernelRoute is `ip route show <dst>` in ns.
func kernelRoute(t *testing.T, ns, dst string) string {
	t.Helper()
	return strings.TrimSpace(testutil.Run(t, "ip", "-n", ns, "route", "show", dst))
}

// txPackets is the transmit packet counter of ifname in ns (0 if absent).
func txPackets(t *testing.T, ns, ifname string) uint64 {
	t.Helper()
	out, err := tool("ip", "-n", ns, "-s", "-j", "link", "show", ifname)
	if err != nil {
		return 0
	}
	var links []struct {
		Stats struct {
			TX struct {
				Packets uint64 `json:"packets"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if json.Unmarshal(out, &links) != nil || len(links) != 1 {
		return 0
	}
	return links[0].Stats.TX.Packets
}

// TestMultiNode runs two nodes, each with its own dpd and controller
// stream, and judges cross-node traffic by connections: no-encap routes,
// policy on both sides, route removal, VXLAN, and nat_outgoing.
func TestMultiNode(t *testing.T) {
	testutil.RequirePrivileged(t)
	a := &mnNode{Node: NewNode(t, "a", "192.168.100.1"), block: "10.70.1.0/26", vtepIP: "10.70.1.1", vtepMAC: "66:dd:00:00:01:01"}
	b := &mnNode{Node: NewNode(t, "b", "192.168.100.2"), block: "10.70.2.0/26", vtepIP: "10.70.2.1", vtepMAC: "66:dd:00:00:02:01"}
	nodes := []*mnNode{a, b}
	Link(t, a.Name, a.IP, b.Name, b.IP, "ul0")
	inet := NewNode(t, "i", mnInetIP)
	Link(t, a.Name, mnInetGW, inet.Name, mnInetIP, "inet0")
	// Nodes have a default route, as real ones do; without one, proxy ARP
	// would not answer the pods for 169.254.1.1.
	testutil.Run(t, "ip", "-n", a.Name, "route", "add", "default", "via", mnInetIP)
	testutil.Run(t, "ip", "-n", b.Name, "route", "add", "default", "via", a.IP)
	a.pod = a.NewPod(t, "pa", "10.70.1.10")
	b.pod = b.NewPod(t, "pb", "10.70.2.10")
	for _, n := range nodes {
		testutil.ServeName(t, n.pod.NS, mnPort, n.pod.Name)
	}
	testutil.ServePeer(t, inet.Name, mnPort)

	for _, n := range nodes {
		n.Start(t)
		snap := []*felix.ToDataplane{
			ConfigMsg(map[string]string{"FelixHostname": n.Name}),
			Profile(mnAllowProf, Rules(Allow()), Rules(Allow())),
			PodEndpoint(n.pod, []string{mnAllowProf}),
		}
		for _, o := range nodes {
			snap = append(snap, HostMsg(o.Name, o.IP))
		}
		snap = append(snap, mnRoutes(n, nodes, felix.IPPoolType_NO_ENCAP, false)...)
		n.c = n.D.Connect(t, snap)
		n.c.WaitInSync(t)
		n.c.WaitStatus(t, "up", n.pod.ID())
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range nodes {
			for _, args := range [][]string{{"route"}, {"neigh"}, {"-d", "link"}} {
				out, err := tool("ip", append([]string{"-n", n.Name}, args...)...)
				t.Logf("node %s: ip %s (%v):\n%s", n.Name, strings.Join(args, " "), err, out)
			}
		}
	})
	pa, pb := a.pod.Workload(), b.pod.Workload()
	toB, toA := fmt.Sprintf("%s:%d", b.pod.IP, mnPort), fmt.Sprintf("%s:%d", a.pod.IP, mnPort)

	t.Run("no-encap", func(t *testing.T) {
		eventuallyAnswers(t, pa, "tcp4", toB, b.pod.Name)
		eventuallyAnswers(t, pb, "tcp4", toA, a.pod.Name)
		eventuallyAnswers(t, pa, "udp4", toB, b.pod.Name)
		if r := kernelRoute(t, a.Name, b.block); !strings.Contains(r, "via "+b.IP) || !strings.Contains(r, "proto 221") {
			t.Fatalf("node a's route to %s: %q, want via %s proto 221", b.block, r, b.IP)
		}
	})

	t.Run("policy-on-both-sides", func(t *testing.T) {
		// b's ingress refuses a's pod; then a's egress refuses b's pod.
		deny := Policy("default", "mn-deny-in", Rules(Deny(SrcNet(a.pod.IP+"/32")), Allow()), nil)
		b.c.Send(t, deny, PodEndpoint(b.pod, []string{mnAllowProf}, Tier("default", "", []string{"mn-deny-in"}, nil)))
		eventuallyBlocked(t, pa, "tcp4", toB)
		b.c.Send(t, PodEndpoint(b.pod, []string{mnAllowProf}), PolicyRemove(PolicyID("mn-deny-in")))
		eventuallyAnswers(t, pa, "tcp4", toB, b.pod.Name)

		deny = Policy("default", "mn-deny-out", nil, Rules(Deny(DstNet(b.block)), Allow()))
		a.c.Send(t, deny, PodEndpoint(a.pod, []string{mnAllowProf}, Tier("default", "", nil, []string{"mn-deny-out"})))
		eventuallyBlocked(t, pa, "tcp4", toB)
		a.c.Send(t, PodEndpoint(a.pod, []string{mnAllowProf}), PolicyRemove(PolicyID("mn-deny-out")))
		eventuallyAnswers(t, pa, "tcp4", toB, b.pod.Name)
	})

	t.Run("route-removed", func(t *testing.T) {
		a.c.Send(t, RouteRemoveMsg(b.block))
		eventuallyBlocked(t, pa, "tcp4", toB)
		if r := kernelRoute(t, a.Name, b.block); r != "" {
			t.Fatalf("route to %s left after RouteRemove: %q", b.block, r)
		}
		a.c.Send(t, mnRoutes(a, nodes, felix.IPPoolType_NO_ENCAP, false)...)
		eventuallyAnswers(t, pa, "tcp4", toB, b.pod.Name)
	})

	t.Run("vxlan", func(t *testing.T) {
		for _, n := range nodes {
			var msgs []*felix.ToDataplane
			for _, o := range nodes {
				msgs = append(msgs, VTEPMsg(o.Name, o.vtepMAC, o.vtepIP, o.IP))
			}
			n.c.Send(t, append(msgs, mnRoutes(n, nodes, felix.IPPoolType_VXLAN, false)...)...)
		}
		for _, n := range nodes {
			for _, o := range nodes {
				if o == n {
					continue
				}
				testutil.WaitFor(t, svcTimeout, fmt.Sprintf("node %s routes %s through %s", n.Name, o.block, mnVXLANDev), func() bool {
					r, _ := tool("ip", "-n", n.Name, "route", "show", o.block)
					return strings.Contains(string(r), "via "+o.vtepIP+" dev "+mnVXLANDev)
				})
			}
		}
		before := txPackets(t, a.Name, mnVXLANDev)
		eventuallyAnswers(t, pa, "tcp4", toB, b.pod.Name)
		eventuallyAnswers(t, pb, "tcp4", toA, a.pod.Name)
		if after := txPackets(t, a.Name, mnVXLANDev); after <= before {
			t.Fatalf("%s on node a sent no packets (%d -> %d): traffic did not use the tunnel", mnVXLANDev, before, after)
		}
		// Policy still holds over the tunnel.
		deny := Policy("default", "mn-deny-vx", Rules(Deny(SrcNet(a.pod.IP+"/32")), Allow()), nil)
		b.c.Send(t, deny, PodEndpoint(b.pod, []string{mnAllowProf}, Tier("default", "", []string{"mn-deny-vx"}, nil)))
		eventuallyBlocked(t, pa, "tcp4", toB)
		b.c.Send(t, PodEndpoint(b.pod, []string{mnAllowProf}), PolicyRemove(PolicyID("mn-deny-vx")))
		eventuallyAnswers(t, pa, "tcp4", toB, b.pod.Name)
	})

	t.Run("nat-outgoing", func(t *testing.T) {
		toInet := fmt.Sprintf("%s:%d", mnInetIP, mnPort)
		// Without nat_outgoing the internet cannot answer: it has no route
		// back to the pool.
		eventuallyBlocked(t, pa, "tcp4", toInet)
		a.c.Send(t, mnRoutes(a, nodes, felix.IPPoolType_VXLAN, true)...)
		eventuallyAnswers(t, pa, "tcp4", toInet, mnInetGW)
		// Traffic between pods is not masqueraded: b still sees a's pod.
		testutil.ServePeer(t, b.pod.NS, mnPort+1)
		eventuallyAnswers(t, pa, "tcp4", fmt.Sprintf("%s:%d", b.pod.IP, mnPort+1), a.pod.IP)
		a.c.Send(t, mnRoutes(a, nodes, felix.IPPoolType_VXLAN, false)...)
		eventuallyBlocked(t, pa, "tcp4", toInet)
	})
}
