package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

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
	hl, err := d.Client(t).Inspect().ListHostEndpoints(context.Background(), &dpdv1.ListHostEndpointsRequest{})
	if err != nil || len(hl.GetHostEndpoints()) != 1 || len(hl.GetHostEndpoints()[0].GetInterfaces()) != 1 {
		t.Fatalf("ListHostEndpoints: %v %v", hl, err)
	}
	if hi := hl.GetHostEndpoints()[0].GetInterfaces()[0]; hi.GetName() != "eth0" || hi.GetIfindex() == 0 ||
		!hi.GetKernelReady() || hi.GetAttachMode() == "" || hi.GetIngressProgram() == "" {
		t.Errorf("eth0 in Inspect: %v", hi)
	}
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

// Traffic the node forwards between its eth0 and a pod is not the node's
// own: a host endpoint's normal policy does not touch it, its forward
// policy (applyOnForward) does.
func TestHostEndpointForward(t *testing.T) {
	testutil.RequirePrivileged(t)
	const nodeIP, clientIP = "192.168.232.1", "192.168.232.2"
	node := NewNode(t, "hepf", nodeIP)
	cl := NewNode(t, "hepfc", clientIP)
	Link(t, node.Name, nodeIP, cl.Name, clientIP, "eth0")
	clientW := &Workload{Workload: &testutil.Workload{NS: cl.Name, IP: clientIP}, Pod: "client"}
	clientW.Serve(t, []int{22}, nil)
	pod := node.NewPod(t, "hf1", WorkloadSubnet+"231")
	pod.Workload().Serve(t, []int{8080, 9090}, nil)
	testutil.Run(t, "ip", "-n", cl.Name, "route", "add", pod.IP+"/32", "via", nodeIP)
	// The node's default route faces the client (pods' gateway 169.254.1.1
	// is answered by proxy ARP only where the node has a route).
	testutil.Run(t, "ip", "-n", node.Name, "route", "add", "default", "via", clientIP)

	d := node.Start(t)
	c := d.Connect(t, []*felix.ToDataplane{
		ConfigMsg(map[string]string{"InterfacePrefix": "cali"}),
		Profile("allow-all", Rules(Allow()), Rules(Allow())),
		PodEndpoint(pod, []string{"allow-all"}),
	})
	c.WaitInSync(t)
	c.WaitStatus(t, "up", pod.ID())
	Expect(t, Allowed(TCP(clientW, pod.IP, 8080)), Allowed(TCP(clientW, pod.IP, 9090)))

	// DefaultEndpointToHostAction: Drop unless set (Felix's default) for
	// the pod's traffic to the node itself, never for the node's to its pod.
	nodeW := &Workload{Workload: &testutil.Workload{NS: node.Name, IP: nodeIP}, Pod: "node"}
	nodeW.Serve(t, []int{7070}, nil)
	podW := pod.Workload()
	Expect(t, Denied(TCP(podW, nodeIP, 7070)), Allowed(TCP(nodeW, pod.IP, 8080)), Allowed(TCP(podW, clientIP, 22)))
	c.Send(t, ConfigMsg(map[string]string{"InterfacePrefix": "cali", "DefaultEndpointToHostAction": "Accept"}))
	Expect(t, Allowed(TCP(podW, nodeIP, 7070)))
	// Return: the wildcard host endpoint's ingress policy decides (none
	// yet: accepted).
	c.Send(t, ConfigMsg(map[string]string{"InterfacePrefix": "cali", "DefaultEndpointToHostAction": "Return"}))
	Expect(t, Allowed(TCP(podW, nodeIP, 7070)))

	// A deny-all wildcard host endpoint without forward policy: the node
	// is closed, forwarding to the pod is not.
	c.Send(t, HostEndpointMsg("all", "*", nil))
	c.WaitHostStatus(t, "all", "up")
	Expect(t, Allowed(TCP(clientW, pod.IP, 8080)), Denied(Ping(clientW, nodeIP)),
		Denied(TCP(podW, nodeIP, 7070)), // Return: the wildcard's (deny-all) ingress policy
		Allowed(TCP(nodeW, pod.IP, 8080)))

	// Forward policy allowing TCP 9090 in: the rest forwarded in is denied.
	fwd := HostEndpointMsg("all", "*", nil)
	fwd.GetHostEndpointUpdate().Endpoint.ForwardTiers = []*felix.TierInfo{Tier("default", "Deny", []string{"fwd-9090"}, nil)}
	c.Send(t, Policy("default", "fwd-9090", Rules(Allow(Proto("tcp"), DstPorts(Port(9090)))), nil), fwd)
	Expect(t, Denied(TCP(clientW, pod.IP, 8080)), Allowed(TCP(clientW, pod.IP, 9090)), Denied(Ping(clientW, nodeIP)))

	c.Send(t, HostEndpointRemoveMsg("all"))
	Expect(t, Allowed(TCP(clientW, pod.IP, 8080)), Allowed(Ping(clientW, nodeIP)), Allowed(TCP(podW, nodeIP, 7070)))
}

// Untracked policy runs first and what it allows leaves no conntrack
// entry (so its replies need their own rule); pre-DNAT policy denies new
// flows before the normal policy could allow them; failsafes pass both.
func TestHostEndpointStages(t *testing.T) {
	testutil.RequirePrivileged(t)
	const nodeIP, clientIP = "192.168.234.1", "192.168.234.2"
	node := NewNode(t, "heps", nodeIP)
	cl := NewNode(t, "hepsc", clientIP)
	Link(t, node.Name, nodeIP, cl.Name, clientIP, "eth0")
	nodeW := &Workload{Workload: &testutil.Workload{NS: node.Name, IP: nodeIP}, Pod: "node"}
	clientW := &Workload{Workload: &testutil.Workload{NS: cl.Name, IP: clientIP}, Pod: "client"}
	nodeW.Serve(t, []int{8080, 9090, 22}, nil)

	d := node.Start(t)
	c := d.Connect(t, []*felix.ToDataplane{ConfigMsg(map[string]string{"InterfacePrefix": "cali"})})
	c.WaitInSync(t)
	hep := HostEndpointMsg("eth0", "eth0", nil, Tier("default", "Deny", []string{"allow-9090"}, nil))
	ep := hep.GetHostEndpointUpdate().Endpoint
	ep.UntrackedTiers = []*felix.TierInfo{Tier("raw", "Pass", []string{"untracked-8080"}, []string{"untracked-8080"})}
	ep.PreDnatTiers = []*felix.TierInfo{Tier("pre", "Pass", []string{"prednat-deny-tcp"}, nil)}
	c.Send(t,
		Policy("default", "allow-9090", Rules(Allow(Proto("tcp"), DstPorts(Port(9090)))), nil),
		Policy("raw", "untracked-8080", Rules(Allow(Proto("tcp"), DstPorts(Port(8080)))), Rules(Allow(Proto("tcp"), SrcPorts(Port(8080))))),
		Policy("pre", "prednat-deny-tcp", Rules(Deny(Proto("tcp"))), nil),
		hep,
	)
	c.WaitHostStatus(t, "eth0", "up")
	Expect(t,
		Allowed(TCP(clientW, nodeIP, 8080)), // untracked both ways
		Denied(TCP(clientW, nodeIP, 9090)),  // pre-DNAT deny beats the normal allow
		Allowed(TCP(clientW, nodeIP, 22)),   // failsafe beats both
		Denied(Ping(clientW, nodeIP)),       // no match anywhere: the normal policy denies
	)
	ports := ctPorts(t, d.PinDir)
	if ports[8080] != 0 || ports[22] == 0 {
		t.Errorf("conntrack entries by destination port %v: want none for the untracked 8080, some for the failsafe 22", ports)
	}

	// Without the pre-DNAT tier, the normal policy allows 9090 (tracked).
	ep.PreDnatTiers = nil
	c.Send(t, hep)
	Expect(t, Allowed(TCP(clientW, nodeIP, 9090)), Allowed(TCP(clientW, nodeIP, 8080)))
	if ports := ctPorts(t, d.PinDir); ports[9090] == 0 || ports[8080] != 0 {
		t.Errorf("conntrack entries by destination port %v: want 9090 tracked, 8080 not", ports)
	}
}

// A host endpoint bound by expected address follows the address to
// another interface: the old one is unpoliced, the new one policed.
func TestHostEndpointExpectedIP(t *testing.T) {
	testutil.RequirePrivileged(t)
	const ip0, peer0, ip1, peer1 = "192.168.236.1", "192.168.236.2", "192.168.237.1", "192.168.237.2"
	node := NewNode(t, "hepi", ip0)
	cl := NewNode(t, "hepic", peer0)
	Link(t, node.Name, ip0, cl.Name, peer0, "eth0")
	Link(t, node.Name, ip1, cl.Name, peer1, "eth1")
	nodeW := &Workload{Workload: &testutil.Workload{NS: node.Name, IP: ip0}, Pod: "node"}
	clientW := &Workload{Workload: &testutil.Workload{NS: cl.Name, IP: peer0}, Pod: "client"}
	nodeW.Serve(t, []int{8080}, nil)
	const moved = "192.168.238.1"
	testutil.Run(t, "ip", "-n", node.Name, "addr", "add", moved+"/32", "dev", "eth0")
	testutil.Run(t, "ip", "-n", cl.Name, "route", "add", moved+"/32", "dev", "eth0")

	d := node.Start(t)
	c := d.Connect(t, []*felix.ToDataplane{ConfigMsg(map[string]string{"InterfacePrefix": "cali"})})
	c.WaitInSync(t)
	hep := HostEndpointMsg("by-ip", "", nil)
	hep.GetHostEndpointUpdate().Endpoint.ExpectedIpv4Addrs = []string{moved}
	c.Send(t, hep)
	c.WaitHostStatus(t, "by-ip", "up")
	Expect(t, Denied(TCP(clientW, ip0, 8080)), Allowed(TCP(clientW, ip1, 8080)))

	testutil.Run(t, "ip", "-n", node.Name, "addr", "del", moved+"/32", "dev", "eth0")
	testutil.Run(t, "ip", "-n", node.Name, "addr", "add", moved+"/32", "dev", "eth1")
	Expect(t, Allowed(TCP(clientW, ip0, 8080)), Denied(TCP(clientW, ip1, 8080)))
	hl, err := d.Client(t).Inspect().ListHostEndpoints(context.Background(), &dpdv1.ListHostEndpointsRequest{})
	if err != nil || len(hl.GetHostEndpoints()) != 1 || len(hl.GetHostEndpoints()[0].GetInterfaces()) != 1 ||
		hl.GetHostEndpoints()[0].GetInterfaces()[0].GetName() != "eth1" {
		t.Errorf("after the move: %v %v", hl, err)
	}
}

// kill -9 leaves a host interface policed as it was (failsafes open, the
// rest denied) until the restarted dpd's first apply, which writes
// nothing for it; a failsafe connection loses no segment throughout.
func TestHostEndpointRestart(t *testing.T) {
	testutil.RequirePrivileged(t)
	const nodeIP, clientIP = "192.168.239.1", "192.168.239.2"
	node := NewNode(t, "hepr", nodeIP)
	cl := NewNode(t, "heprc", clientIP)
	Link(t, node.Name, nodeIP, cl.Name, clientIP, "eth0")
	nodeW := &Workload{Workload: &testutil.Workload{NS: node.Name, IP: nodeIP}, Pod: "node"}
	clientW := &Workload{Workload: &testutil.Workload{NS: cl.Name, IP: clientIP}, Pod: "client"}
	nodeW.Serve(t, []int{8080, 22}, nil)
	snap := []*felix.ToDataplane{ConfigMsg(map[string]string{"InterfacePrefix": "cali"}), HostEndpointMsg("node", "eth0", nil)}

	d := node.Start(t)
	c := d.Connect(t, snap)
	c.WaitHostStatus(t, "node", "up")
	enforced := []Expectation{Denied(TCP(clientW, nodeIP, 8080)), Allowed(TCP(clientW, nodeIP, 22))}
	Expect(t, enforced...)
	tr := startTCP(t, clientW, nodeW, 2379) // inbound failsafe tcp:2379
	before := entryProgsIn(t, node.Name, "eth0")

	d.Kill(t)
	Expect(t, enforced...) // no dpd at all: still policed, failsafes open
	d2 := node.Start(t)
	c2 := d2.Connect(t, snap)
	c2.WaitHostStatus(t, "node", "up")
	c2.WaitInSync(t)
	Expect(t, enforced...)
	if after := entryProgsIn(t, node.Name, "eth0"); after != before {
		t.Errorf("eth0 programs changed across the restart:\n%s\n%s", before, after)
	}
	f, ok := firstApplyOf(d2)
	if !ok {
		t.Fatal("no first-apply report in the dpd log")
	}
	for _, k := range []string{"program_loads", "jump_writes", "ifstate_writes", "attaches", "garbage_collected"} {
		if f[k] != "0" {
			t.Errorf("first apply after the restart: %s=%s, want 0 (%v)", k, f[k], f)
		}
	}
	r := tr.stop()
	if r.Err != nil || r.ClientRetrans != 0 || r.SrvRetrans != 0 || r.Rounds == 0 {
		t.Errorf("failsafe connection across kill -9: %d rounds, err %v, retransmits %d/%d", r.Rounds, r.Err, r.ClientRetrans, r.SrvRetrans)
	}
}

// firstApplyOf is the first-apply report of d (survival_kit_test.go).
func firstApplyOf(d *Daemon) (map[string]string, bool) { return (&node{}).firstApply(d) }
