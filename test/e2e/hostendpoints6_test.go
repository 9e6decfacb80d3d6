package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// IPv6 to and from the node itself through a host endpoint, by real
// packets: policed like IPv4 (no policy denies all but the failsafes, an
// IPv6 rule allows IPv6 only), IPv6 failsafes as Felix writes them (a
// port alone is either family; a bracketed net narrows the peers), and
// neighbour discovery keeps working under the deny.
func TestHostEndpointsIPv6(t *testing.T) {
	testutil.RequirePrivileged(t)
	const nodeIP, clientIP = "192.168.238.1", "192.168.238.2"
	const nodeIP6, clientIP6 = "fd00:238::1", "fd00:238::2"
	node := NewNode(t, "hep6", nodeIP)
	cl := NewNode(t, "hep6c", clientIP)
	Link(t, node.Name, nodeIP, cl.Name, clientIP, "eth0")
	for _, s := range [][2]string{{node.Name, nodeIP6}, {cl.Name, clientIP6}} {
		testutil.Run(t, "ip", "-n", s[0], "-6", "addr", "add", s[1]+"/64", "dev", "eth0", "nodad")
	}
	nodeW := &Workload{Workload: &testutil.Workload{NS: node.Name, IP: nodeIP6}, Pod: "node"}
	clientW := &Workload{Workload: &testutil.Workload{NS: cl.Name, IP: clientIP6}, Pod: "client"}
	nodeW.Serve(t, []int{8080, 22, 7070, 7071}, nil)
	clientW.Serve(t, nil, []int{53, 5353})

	cfg := map[string]string{
		"InterfacePrefix": "cali",
		// The defaults' outbound udp:53 stays; inbound: SSH from anyone,
		// 7070 from the client only, 7071 from a net the client is not in.
		"FailsafeInboundHostPorts": "tcp:22, tcp:[" + clientIP6 + "]:7070, tcp:[fd00:239::/64]:7071",
	}
	d := node.Start(t)
	c := d.Connect(t, []*felix.ToDataplane{ConfigMsg(cfg)})
	c.WaitInSync(t)
	open := []Expectation{
		Allowed(TCP(clientW, nodeIP6, 8080)), Allowed(TCP(clientW, nodeIP6, 7071)), Allowed(Ping(clientW, nodeIP6)),
		Allowed(UDP(nodeW, clientIP6, 5353)), Allowed(TCP(clientW, nodeIP, 8080)),
	}
	Expect(t, open...) // no host endpoint: not policed

	// No tiers and no profiles: both families denied but for the failsafes.
	c.Send(t, HostEndpointMsg("node-eth0", "eth0", nil))
	c.WaitHostStatus(t, "node-eth0", "up")
	closed := []Expectation{
		Allowed(TCP(clientW, nodeIP6, 22)),   // inbound failsafe of either family, and its replies
		Allowed(TCP(clientW, nodeIP6, 7070)), // inbound failsafe of the client's address
		Allowed(UDP(nodeW, clientIP6, 53)),   // outbound failsafe (Felix's default udp:53)
		Denied(TCP(clientW, nodeIP6, 8080)), Denied(Ping(clientW, nodeIP6)), Denied(UDP(nodeW, clientIP6, 5353)),
		Denied(TCP(clientW, nodeIP6, 7071)), // its failsafe's net is elsewhere
		Denied(TCP(clientW, nodeIP, 8080)),
	}
	Expect(t, closed...)
	// Inspect's trace runs the host entry program of eth0.
	traceHost(t, d, "tcp", clientIP6, nodeIP6, 8080, "deny", "no-match", "")
	traceHost(t, d, "tcp", clientIP6, nodeIP6, 22, "allow", "exempt: failsafe port", "")

	// Neighbour discovery passes the deny: with both neighbour caches
	// emptied, the failsafe port is reachable again only if the node's and
	// the client's solicitations and advertisements cross eth0.
	for _, ns := range []string{node.Name, cl.Name} {
		testutil.Run(t, "ip", "-n", ns, "-6", "neigh", "flush", "dev", "eth0")
	}
	Expect(t, Allowed(TCP(clientW, nodeIP6, 22)), Allowed(UDP(nodeW, clientIP6, 53)))

	// An IPv6-only rule allowing TCP 8080 in: IPv6 connects (its replies
	// by conntrack), IPv4 to the same port stays denied, and so does the
	// rest of IPv6.
	c.Send(t,
		Policy("default", "allow-8080-v6", Rules(Allow(IPv6Only(), Proto("tcp"), DstPorts(Port(8080)))), nil),
		HostEndpointMsg("node-eth0", "eth0", nil, Tier("default", "Deny", []string{"allow-8080-v6"}, nil)),
	)
	Expect(t,
		Allowed(TCP(clientW, nodeIP6, 8080)), Allowed(TCP(clientW, nodeIP6, 22)),
		Denied(TCP(clientW, nodeIP, 8080)), Denied(Ping(clientW, nodeIP6)), Denied(UDP(nodeW, clientIP6, 5353)),
	)
	traceHost(t, d, "tcp", clientIP6, nodeIP6, 8080, "allow", "policy", "allow-8080-v6")
	traceHost(t, d, "tcp", clientIP, nodeIP, 8080, "deny", "tier-default", "")

	// Removed: both families open again.
	c.Send(t, HostEndpointRemoveMsg("node-eth0"))
	Expect(t, open...)

	// Bound by its expected IPv6 address instead of a name: eth0 is
	// policed again, failsafes aside.
	byIP := HostEndpointMsg("by-ip6", "", nil)
	byIP.GetHostEndpointUpdate().Endpoint.ExpectedIpv6Addrs = []string{nodeIP6}
	c.Send(t, byIP)
	c.WaitHostStatus(t, "by-ip6", "up")
	Expect(t, Allowed(TCP(clientW, nodeIP6, 22)), Denied(TCP(clientW, nodeIP6, 8080)), Denied(TCP(clientW, nodeIP, 8080)))
	c.Send(t, HostEndpointRemoveMsg("by-ip6"))
	Expect(t, open...)
}

// DefaultEndpointToHostAction decides a pod's IPv6 to the node itself as
// it does IPv4: Drop (Felix's default), Accept, or Return to the wildcard
// host endpoint's ingress policy, which sees the IPv6 packet.
func TestEndpointToHostIPv6(t *testing.T) {
	testutil.RequirePrivileged(t)
	const nodeIP, nodeIP6, pod6 = "192.168.240.1", "fd00:240::1", "fd00:241::10"
	node := NewNode(t, "hept6", nodeIP)
	peer := NewNode(t, "hept6p", "192.168.240.2")
	Link(t, node.Name, nodeIP, peer.Name, peer.IP, "eth0")
	testutil.Run(t, "ip", "-n", node.Name, "-6", "addr", "add", nodeIP6+"/64", "dev", "eth0", "nodad")
	pod := node.NewPod(t, "ht6", WorkloadSubnet+"240")
	testutil.AddIPv6(t, &testutil.Workload{NS: pod.NS, HostIface: pod.HostIface}, node.Name, pod6)
	podW := pod.Workload()
	podW.Serve(t, []int{8080}, nil)
	nodeW := &Workload{Workload: &testutil.Workload{NS: node.Name, IP: nodeIP6}, Pod: "node"}
	nodeW.Serve(t, []int{7070}, nil)

	cfg := func(action string) *felix.ToDataplane {
		return ConfigMsg(map[string]string{"InterfacePrefix": "cali", "DefaultEndpointToHostAction": action})
	}
	d := node.Start(t)
	c := d.Connect(t, []*felix.ToDataplane{
		cfg(""),
		Profile("allow-all", Rules(Allow()), Rules(Allow())),
		dualPodEndpoint(pod, pod6, []string{"allow-all"}),
	})
	c.WaitInSync(t)
	c.WaitStatus(t, "up", pod.ID())
	toNode, fromNode := TCP(podW, nodeIP6, 7070), TCP(nodeW, pod6, 8080)
	Expect(t, Allowed(fromNode), Denied(toNode)) // Drop unless set; the node's own flows to its pod never meet it
	c.Send(t, cfg("Accept"))
	Expect(t, Allowed(toNode))
	c.Send(t, cfg("Return")) // no wildcard host endpoint: accepted
	Expect(t, Allowed(toNode))

	// Return with a deny-all wildcard, then with one allowing TCP 7070
	// over IPv6.
	c.Send(t, HostEndpointMsg("all", "*", nil))
	c.WaitHostStatus(t, "all", "up")
	Expect(t, Allowed(fromNode), Denied(toNode))
	c.Send(t,
		Policy("default", "allow-7070-v6", Rules(Allow(IPv6Only(), Proto("tcp"), DstPorts(Port(7070)))), nil),
		HostEndpointMsg("all", "*", nil, Tier("default", "Deny", []string{"allow-7070-v6"}, nil)),
	)
	Expect(t, Allowed(toNode), Allowed(fromNode))
	c.Send(t, HostEndpointRemoveMsg("all"))
	Expect(t, Allowed(toNode))
}

// traceHost traces a packet into host endpoint node-eth0 and checks the
// verdict, what decided, and the deciding policy when one did.
func traceHost(t *testing.T, d *Daemon, proto, src, dst string, port uint32, verdict, decidedBy, policy string) {
	t.Helper()
	tr, err := d.Client(t).Inspect().Trace(context.Background(), &dpdv1.TraceRequest{Endpoint: "node-eth0",
		Direction: "ingress", Protocol: proto, SrcIp: src, DstIp: dst, SrcPort: 40000, DstPort: port})
	if err != nil {
		t.Fatalf("trace %s %s -> %s:%d: %v", proto, src, dst, port, err)
	}
	if tr.GetVerdict() != verdict || tr.GetDecidedBy() != decidedBy || tr.GetInterface() != "eth0" ||
		!strings.HasSuffix(tr.GetRule().GetPolicy(), policy) {
		t.Errorf("trace %s %s -> %s:%d = %v, want %s by %s %s", proto, src, dst, port, tr, verdict, decidedBy, policy)
	}
}

// IPv6 the node forwards between its eth0 and a pod is not the node's
// own: a host endpoint's normal policy leaves it alone, its forward policy
// (applyOnForward) polices it, replies by conntrack.
func TestHostEndpointForwardIPv6(t *testing.T) {
	testutil.RequirePrivileged(t)
	const nodeIP, clientIP = "192.168.242.1", "192.168.242.2"
	const nodeIP6, clientIP6, pod6 = "fd00:242::1", "fd00:242::2", "fd00:243::10"
	node := NewNode(t, "hepf6", nodeIP)
	cl := NewNode(t, "hepf6c", clientIP)
	Link(t, node.Name, nodeIP, cl.Name, clientIP, "eth0")
	for _, s := range [][2]string{{node.Name, nodeIP6}, {cl.Name, clientIP6}} {
		testutil.Run(t, "ip", "-n", s[0], "-6", "addr", "add", s[1]+"/64", "dev", "eth0", "nodad")
	}
	testutil.Run(t, "ip", "-n", cl.Name, "-6", "route", "add", pod6+"/128", "via", nodeIP6)
	clientW := &Workload{Workload: &testutil.Workload{NS: cl.Name, IP: clientIP6}, Pod: "client"}
	pod := node.NewPod(t, "hf6", WorkloadSubnet+"242")
	testutil.AddIPv6(t, &testutil.Workload{NS: pod.NS, HostIface: pod.HostIface}, node.Name, pod6)
	pod.Workload().Serve(t, []int{8080, 9090}, nil)

	d := node.Start(t)
	c := d.Connect(t, []*felix.ToDataplane{
		ConfigMsg(map[string]string{"InterfacePrefix": "cali"}),
		Profile("allow-all", Rules(Allow()), Rules(Allow())),
		dualPodEndpoint(pod, pod6, []string{"allow-all"}),
	})
	c.WaitInSync(t)
	c.WaitStatus(t, "up", pod.ID())
	Expect(t, Allowed(TCP(clientW, pod6, 8080)), Allowed(TCP(clientW, pod6, 9090)))

	// A deny-all wildcard without forward policy: the node is closed,
	// forwarding to its pod is not.
	c.Send(t, HostEndpointMsg("all", "*", nil))
	c.WaitHostStatus(t, "all", "up")
	Expect(t, Allowed(TCP(clientW, pod6, 8080)), Denied(Ping(clientW, nodeIP6)))

	// Forward policy allowing TCP 9090 over IPv6: the rest forwarded in is
	// denied.
	fwd := HostEndpointMsg("all", "*", nil)
	fwd.GetHostEndpointUpdate().Endpoint.ForwardTiers = []*felix.TierInfo{Tier("default", "Deny", []string{"fwd-9090-v6"}, nil)}
	c.Send(t, Policy("default", "fwd-9090-v6", Rules(Allow(IPv6Only(), Proto("tcp"), DstPorts(Port(9090)))), nil), fwd)
	Expect(t, Allowed(TCP(clientW, pod6, 9090)), Denied(TCP(clientW, pod6, 8080)), Denied(Ping(clientW, nodeIP6)))

	c.Send(t, HostEndpointRemoveMsg("all"))
	Expect(t, Allowed(TCP(clientW, pod6, 8080)), Allowed(Ping(clientW, nodeIP6)))
}
