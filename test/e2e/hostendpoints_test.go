package e2e

import (
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// hostKey is the Controller's status key of host endpoint id.
func hostKey(id string) string { return "hep/" + id }

// WaitHostStatus waits until host endpoint id reports want.
func (c *Controller) WaitHostStatus(t testing.TB, id, want string) {
	t.Helper()
	c.mustAwait(t, "host endpoint "+id+" "+want, func() bool {
		s := c.status[hostKey(id)]
		return !s.removed && s.status == want
	})
}

// entryProgsIn names the programs on ifname's TC hooks in namespace ns,
// TCX links and legacy filters alike.
func entryProgsIn(t *testing.T, ns, ifname string) string {
	t.Helper()
	out := testutil.Run(t, "ip", "netns", "exec", ns, "tc", "filter", "show", "dev", ifname, "ingress") +
		testutil.Run(t, "ip", "netns", "exec", ns, "tc", "filter", "show", "dev", ifname, "egress")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = orig.Close() }()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	if err := netns.Set(h); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // the thread must not go back to the pool in ns
		}
	}()
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	progs, err := TCXProgs(l.Attrs().Index)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		out += " " + p.Kind + ":" + p.Name
	}
	return out
}

// HostEndpointMsg is a HostEndpointUpdate naming iface ("*": wildcard)
// with tiers and profiles.
func HostEndpointMsg(id, iface string, profiles []string, tiers ...*felix.TierInfo) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: &felix.HostEndpointUpdate{
		Id:       &felix.HostEndpointID{EndpointId: id},
		Endpoint: &felix.HostEndpoint{Name: iface, ProfileIds: profiles, Tiers: tiers},
	}}}
}

// HostEndpointRemoveMsg is a HostEndpointRemove.
func HostEndpointRemoveMsg(id string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_HostEndpointRemove{HostEndpointRemove: &felix.HostEndpointRemove{
		Id: &felix.HostEndpointID{EndpointId: id},
	}}}
}

// A node whose eth0 faces a client: host endpoints on eth0 (by name, then
// by wildcard) police traffic to and from the node itself, failsafe ports
// (inbound SSH, outbound DNS) pass whatever the policy, and removing the
// host endpoint leaves eth0 unpoliced again.
func TestHostEndpoints(t *testing.T) {
	testutil.RequirePrivileged(t)
	const nodeIP, clientIP = "192.168.231.1", "192.168.231.2"
	node := NewNode(t, "hep", nodeIP)
	cl := NewNode(t, "hepc", clientIP)
	Link(t, node.Name, nodeIP, cl.Name, clientIP, "eth0")
	nodeW := &Workload{Workload: &testutil.Workload{NS: node.Name, IP: nodeIP}, Pod: "node"}
	clientW := &Workload{Workload: &testutil.Workload{NS: cl.Name, IP: clientIP}, Pod: "client"}
	nodeW.Serve(t, []int{8080, 22}, nil)
	clientW.Serve(t, nil, []int{53, 5353})

	d := node.Start(t)
	c := d.Connect(t, []*felix.ToDataplane{ConfigMsg(map[string]string{"InterfacePrefix": "cali"})})
	c.WaitInSync(t)
	open := []Expectation{
		Allowed(TCP(clientW, nodeIP, 8080)), Allowed(TCP(clientW, nodeIP, 22)),
		Allowed(UDP(nodeW, clientIP, 5353)), Allowed(UDP(nodeW, clientIP, 53)), Allowed(Ping(clientW, nodeIP)),
	}
	Expect(t, open...) // no host endpoint: not policed

	// By name, no tiers and no profiles: only the failsafes pass.
	c.Send(t, HostEndpointMsg("node-eth0", "eth0", nil))
	c.WaitHostStatus(t, "node-eth0", "up")
	Expect(t,
		Denied(TCP(clientW, nodeIP, 8080)), Denied(Ping(clientW, nodeIP)), Denied(UDP(nodeW, clientIP, 5353)),
		Allowed(TCP(clientW, nodeIP, 22)), // inbound failsafe tcp:22, and its replies
		Allowed(UDP(nodeW, clientIP, 53)), // outbound failsafe udp:53, and its replies
	)
	if progs := entryProgsIn(t, node.Name, "eth0"); !strings.Contains(progs, "dpd_hep_in") || !strings.Contains(progs, "dpd_hep_out") {
		t.Errorf("eth0 carries %q, want the host entry programs", progs)
	}

	// Removed: open again, and the programs are off eth0.
	c.Send(t, HostEndpointRemoveMsg("node-eth0"))
	Expect(t, open...)
	if progs := entryProgsIn(t, node.Name, "eth0"); strings.Contains(progs, "dpd_") {
		t.Errorf("eth0 still carries %q after the host endpoint went", progs)
	}

	// The wildcard with a policy allowing TCP 8080 in: the service
	// connects (its replies by conntrack); the rest to and from the node
	// stays denied, failsafes aside.
	c.Send(t,
		Policy("default", "allow-8080", Rules(Allow(Proto("tcp"), DstPorts(Port(8080)))), nil),
		HostEndpointMsg("node-all", "*", nil, Tier("default", "Deny", []string{"allow-8080"}, nil)),
	)
	c.WaitHostStatus(t, "node-all", "up")
	Expect(t,
		Allowed(TCP(clientW, nodeIP, 8080)), Allowed(TCP(clientW, nodeIP, 22)), Allowed(UDP(nodeW, clientIP, 53)),
		Denied(Ping(clientW, nodeIP)), Denied(UDP(nodeW, clientIP, 5353)),
	)
	c.Send(t, HostEndpointRemoveMsg("node-all"))
	Expect(t, open...)
}
