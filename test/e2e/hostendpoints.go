package e2e

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Host endpoint helpers: statuses, messages and what the node's interface
// carries.

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

// ctPorts lists the destination ports of the live and expired entries of
// dpd's conntrack map under pinDir.
func ctPorts(t *testing.T, pinDir string) map[uint16]int {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, abi.MapConntrack), nil)
	if err != nil {
		t.Fatalf("open conntrack map: %v", err)
	}
	defer func() { _ = m.Close() }()
	out := map[uint16]int{}
	var k tcbpf.CTKey
	var v tcbpf.CTVal
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[tcbpf.FlowOf(&k, &v).Dport]++ // as the flow's first packet had it
	}
	if err := it.Err(); err != nil {
		t.Fatalf("read conntrack map: %v", err)
	}
	return out
}
