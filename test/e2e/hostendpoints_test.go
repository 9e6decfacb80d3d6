package e2e

import (
	"testing"

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
	if pins, err := LinkPins(d.PinDir, "eth0"); err != nil || len(pins) != 2 {
		t.Errorf("eth0 link pins %v (%v), want both hooks attached", pins, err)
	}

	// Removed: open again, and the programs are off eth0.
	c.Send(t, HostEndpointRemoveMsg("node-eth0"))
	Expect(t, open...)
	if pins, err := LinkPins(d.PinDir, "eth0"); err != nil || len(pins) != 0 {
		t.Errorf("eth0 link pins %v (%v) after the host endpoint went", pins, err)
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
