package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Simulated nodes for the multi-node suite: each node is a network
// namespace with an underlay interface, its own dpd (started with nsenter,
// which switches only the network namespace, so the global bpffs and the
// test's temp dirs stay visible; every dpd has its own pin directory), and
// its own workloads, whose host-side veths live in the node's namespace.

// Node is one simulated node.
type Node struct {
	Name string // namespace and Felix hostname
	IP   string // underlay address
	D    *Daemon
}

// NewNode creates the node's namespace (deleted at cleanup, after its dpd
// stopped). Start its dpd with Start once its links exist.
func NewNode(t *testing.T, label, ip string) *Node {
	t.Helper()
	n := &Node{Name: fmt.Sprintf("dpdn%d%s", os.Getpid()%100000, label), IP: ip}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n.Name).Run() })
	testutil.Run(t, "ip", "netns", "add", n.Name)
	testutil.Run(t, "ip", "-n", n.Name, "link", "set", "lo", "up")
	return n
}

// Link joins two namespaces with a veth named ifname on both sides and
// gives each side its /24 address.
func Link(t *testing.T, nsA, ipA, nsB, ipB, ifname string) {
	t.Helper()
	testutil.Run(t, "ip", "-n", nsA, "link", "add", ifname, "type", "veth", "peer", "name", ifname, "netns", nsB)
	for _, s := range [][2]string{{nsA, ipA}, {nsB, ipB}} {
		testutil.Run(t, "ip", "-n", s[0], "addr", "add", s[1]+"/24", "dev", ifname)
		testutil.Run(t, "ip", "-n", s[0], "link", "set", ifname, "up")
	}
}

// Start runs the node's dpd inside its namespace; cleanup stops it and
// removes its pin directory, as StartDaemon does.
func (n *Node) Start(t *testing.T) *Daemon {
	t.Helper()
	cfg := daemonConfig(t, fmt.Sprintf("/sys/fs/bpf/dpd-e2e-%d-%s", os.Getpid(), n.Name))
	cfg.NetNS = n.Name
	n.D = launchDaemon(t, cfg, true)
	return n.D
}

// Pod is a workload of a node.
type Pod struct {
	NS, HostIface, IP, MAC, Name string
}

// NewPod creates a pod namespace wired to node like Calico's CNI plugin
// would: a veth whose host side stays in the node's namespace, the pod's
// address as /32 and a default route via 169.254.1.1.
func (n *Node) NewPod(t *testing.T, name, ip string) *Pod {
	t.Helper()
	p := &Pod{NS: n.Name + name, HostIface: "cali" + name, IP: ip, Name: name}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.NS).Run() })
	testutil.Run(t, "ip", "netns", "add", p.NS)
	testutil.Run(t, "ip", "-n", n.Name, "link", "add", p.HostIface, "type", "veth", "peer", "name", "eth0", "netns", p.NS)
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", ip + "/32", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "169.254.1.1", "dev", "eth0", "scope", "link"},
		{"route", "add", "default", "via", "169.254.1.1", "dev", "eth0"},
	} {
		testutil.Run(t, "ip", append([]string{"-n", p.NS}, args...)...)
	}
	testutil.Run(t, "ip", "-n", n.Name, "link", "set", p.HostIface, "up")
	var links []struct {
		Address string `json:"address"`
	}
	out := testutil.Run(t, "ip", "-n", p.NS, "-j", "link", "show", "eth0")
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("read eth0 mac of %s: %v (%q)", p.NS, err, out)
	}
	p.MAC = links[0].Address
	return p
}

// ID is the pod's Felix identity.
func (p *Pod) ID() *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "ns/" + p.Name, EndpointId: "eth0"}
}

// Workload adapts the pod for the socket helpers.
func (p *Pod) Workload() *Workload {
	return &Workload{Workload: &testutil.Workload{NS: p.NS, HostIface: p.HostIface, IP: p.IP}, Pod: p.Name, MAC: p.MAC}
}

// PodEndpoint describes p with profiles and tiers.
func PodEndpoint(p *Pod, profiles []string, tiers ...*felix.TierInfo) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
		Id: p.ID(),
		Endpoint: &felix.WorkloadEndpoint{
			State: "active", Name: p.HostIface, Mac: p.MAC, ProfileIds: profiles,
			Ipv4Nets: []string{p.IP + "/32"}, Tiers: tiers,
		},
	}}}
}

// ConfigMsg is a ConfigUpdate.
func ConfigMsg(kv map[string]string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ConfigUpdate{ConfigUpdate: &felix.ConfigUpdate{Config: kv}}}
}

// HostMsg is a HostMetadataUpdate.
func HostMsg(name, ip string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_HostMetadataUpdate{HostMetadataUpdate: &felix.HostMetadataUpdate{Hostname: name, Ipv4Addr: ip}}}
}

// VTEPMsg is a VXLANTunnelEndpointUpdate.
func VTEPMsg(node, mac, addr, parent string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_VtepUpdate{VtepUpdate: &felix.VXLANTunnelEndpointUpdate{
		Node: node, Mac: mac, Ipv4Addr: addr, ParentDeviceIp: parent,
	}}}
}

// RouteMsg is a RouteUpdate.
func RouteMsg(r *felix.RouteUpdate) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_RouteUpdate{RouteUpdate: r}}
}

// RouteRemoveMsg is a RouteRemove.
func RouteRemoveMsg(dst string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_RouteRemove{RouteRemove: &felix.RouteRemove{Dst: dst}}}
}
