package linux

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// A policy change on an endpoint this process verified writes its jump
// slot and nothing else, reads nothing back; a resync verifies (and
// repairs) the rest.
func TestPolicyChangeWritesOnlyJumps(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	a, b := programmedPair(t, k, "10.67.0.1", "10.67.0.2", func(b *testutil.Workload) *model.Endpoint { return allowAllEndpoint(b, 1) })
	testutil.WaitFor(t, 5*time.Second, "a pings b", func() bool { return pingsQuick(a, b.IP) })

	before := k.Ops()
	if err := applyKnown(t, k, endpointFor(b, 1, denyAll(), allowAll())); err != nil {
		t.Fatal(err)
	}
	d := k.Ops().Sub(before)
	if d.JumpWrites != 1 || d.ProgramLoads != 1 || d.Writes() != 2 {
		t.Fatalf("policy change: %+v, want the new program loaded and one jump write, nothing else", d)
	}
	if n := d.Netlink; n.RouteDumps+n.NeighbourDumps+n.SysctlReads != 0 {
		t.Fatalf("policy change read the interface's configuration back: %+v", n)
	}
	if pingsQuick(a, b.IP) {
		t.Fatal("a still pings b after b's ingress became deny")
	}

	// Drift the fast path does not see: the route to b goes.
	testutil.Run(t, "ip", "route", "del", b.IP+"/32")
	if err := applyKnown(t, k, endpointFor(b, 1, allowAll(), allowAll())); err != nil {
		t.Fatal(err)
	}
	if out := testutil.Run(t, "ip", "route", "show", b.IP); out != "" {
		t.Fatalf("the fast path rewrote the route (%q): it should only switch programs", out)
	}
	k.Resync()
	before = k.Ops()
	if err := applyKnown(t, k, endpointFor(b, 1, allowAll(), allowAll())); err != nil {
		t.Fatal(err)
	}
	d = k.Ops().Sub(before)
	if d.Netlink.RouteDumps == 0 || d.Netlink.RouteWrites() != 1 || d.JumpWrites != 0 || d.Attaches != 0 {
		t.Fatalf("apply after a resync: want a route dump and the one missing route re-added, nothing else; got %+v", d)
	}
	testutil.WaitFor(t, 5*time.Second, "a pings b again", func() bool { return pingsQuick(a, b.IP) })
}

// A link that went down and up lost its routes: the apply that follows the
// link event verifies and rewrites them instead of trusting the earlier one.
func TestLinkFlapReverifies(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	watch(t, k)
	a, b := programmedPair(t, k, "10.67.1.1", "10.67.1.2", func(b *testutil.Workload) *model.Endpoint { return allowAllEndpoint(b, 1) })
	testutil.WaitFor(t, 5*time.Second, "a pings b", func() bool { return pingsQuick(a, b.IP) })
	before := k.Ops()
	testutil.Run(t, "ip", "link", "set", b.HostIface, "down")
	testutil.WaitFor(t, 5*time.Second, "monitor sees b down", func() bool { return k.Link(b.HostIface) != model.LinkUp })
	testutil.Run(t, "ip", "link", "set", b.HostIface, "up")
	testutil.WaitFor(t, 5*time.Second, "monitor sees b up", func() bool { return k.Link(b.HostIface) == model.LinkUp })
	if out := testutil.Run(t, "ip", "route", "show", b.IP); out != "" {
		t.Fatalf("route to b survived the link going down (%q): the test proves nothing", out)
	}
	if err := applyKnown(t, k, allowAllEndpoint(b, 1)); err != nil {
		t.Fatal(err)
	}
	if d := k.Ops().Sub(before); d.Netlink.RouteWrites() != 1 {
		t.Fatalf("apply after the flap: %+v, want the route rewritten", d)
	}
	testutil.WaitFor(t, 5*time.Second, "a pings b after the flap", func() bool { return pingsQuick(a, b.IP) })
}

// An interface that appears after the first apply is new: its endpoint is
// configured and attached without reading anything back first.
func TestNewInterfaceWritesWithoutReading(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	watch(t, k)
	a := newWorkload(t, "10.67.2.1")
	testutil.WaitFor(t, 5*time.Second, "monitor sees a", func() bool { return k.Link(a.HostIface) == model.LinkUp })
	if err := applyKnown(t, k, allowAllEndpoint(a, 0)); err != nil {
		t.Fatal(err)
	}
	if err := k.EndApply(); err != nil { // the first apply after InSync ends
		t.Fatal(err)
	}
	b := newWorkload(t, "10.67.2.2")
	testutil.WaitFor(t, 5*time.Second, "monitor sees b", func() bool { return k.Link(b.HostIface) == model.LinkUp })
	before := k.Ops()
	if err := applyKnown(t, k, allowAllEndpoint(b, 1)); err != nil {
		t.Fatal(err)
	}
	d := k.Ops().Sub(before)
	if n := d.Netlink; n.RouteDumps+n.NeighbourDumps+n.SysctlReads != 0 || n.RouteWrites() != 1 || n.SysctlWrites == 0 {
		t.Fatalf("new interface: %+v, want the route and sysctls written, nothing read", n)
	}
	testutil.WaitFor(t, 5*time.Second, "a pings b", func() bool { return pingsQuick(a, b.IP) })
}

// An interface moved to another namespace and back keeps its ifindex but
// loses its attachments (and routes): the apply after the link event
// attaches again instead of trusting the earlier attach.
func TestNamespaceRoundTripReattaches(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcx", true: "legacy-tc"}[legacy], func(t *testing.T) { namespaceRoundTrip(t, legacy) })
	}
}

func namespaceRoundTrip(t *testing.T, legacy bool) {
	k := openKernelWith(t, Options{PinDir: newPinDir(t), ForceLegacyTC: legacy})
	watch(t, k)
	ipA, ipB := "10.67.3.1", "10.67.3.2"
	if legacy {
		ipA, ipB = "10.67.4.1", "10.67.4.2"
	}
	var epB *model.Endpoint
	a, b := programmedPair(t, k, ipA, ipB, func(b *testutil.Workload) *model.Endpoint {
		epB = endpointFor(b, 1, denyAll(), allowAll())
		return epB
	})
	park := fmt.Sprintf("dpdpark%d-%v", os.Getpid()%100000, legacy)
	testutil.Run(t, "ip", "netns", "add", park)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", park).Run() })
	testutil.Run(t, "ip", "link", "set", "dev", b.HostIface, "netns", park)
	testutil.WaitFor(t, 5*time.Second, "monitor sees b gone", func() bool { return k.Link(b.HostIface) == model.LinkAbsent })
	testutil.Run(t, "ip", "-n", park, "link", "set", "dev", b.HostIface, "netns", "1")
	testutil.Run(t, "ip", "link", "set", b.HostIface, "up")
	testutil.WaitFor(t, 5*time.Second, "monitor sees b back", func() bool { return k.Link(b.HostIface) == model.LinkUp })
	// The kernel normally hands b its old ifindex back, the case under test;
	// should it not, the assertions below hold all the same.
	ifindex := ifindexOf(t, b.HostIface)
	if err := applyKnown(t, k, epB); err != nil {
		t.Fatal(err)
	}
	if mode, ok := k.datapath().AttachedCurrent(ifindex, b.HostIface); !ok {
		t.Fatalf("entry programs not attached after the round trip and an apply (mode %q)", mode)
	}
	if out := testutil.Run(t, "ip", "route", "show", b.IP); out == "" {
		t.Fatal("no route to b after the apply")
	}
	if pingsQuick(a, b.IP) {
		t.Fatal("a pings b, whose ingress denies everything: b is not policed after the round trip")
	}
}

// An endpoint removed after its interface was re-created under the same
// name (and failed closed) leaves the new interface failed closed: the
// removal takes away only what was the endpoint's.
func TestRemovalAfterRecreateKeepsFailClosed(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	watch(t, k)
	w := newWorkload(t, "10.67.5.1")
	testutil.WaitFor(t, 5*time.Second, "monitor sees w", func() bool { return k.Link(w.HostIface) == model.LinkUp })
	ep := allowAllEndpoint(w, 0)
	if err := applyKnown(t, k, ep); err != nil {
		t.Fatal(err)
	}
	old := ifindexOf(t, w.HostIface)
	testutil.Run(t, "ip", "link", "del", w.HostIface)
	peer := fmt.Sprintf("dpdrc%d", os.Getpid()%100000)
	testutil.Run(t, "ip", "link", "add", w.HostIface, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", w.HostIface).Run() })
	testutil.Run(t, "ip", "link", "set", w.HostIface, "up")
	ifindex := ifindexOf(t, w.HostIface)
	if ifindex == old {
		t.Fatalf("re-created %s kept ifindex %d", w.HostIface, old)
	}
	testutil.WaitFor(t, 5*time.Second, "the new interface fails closed", func() bool {
		ok, ready := ifState(t, k, ifindex)
		return ok && !ready
	})
	if err := k.RemoveEndpoint(ep); err != nil {
		t.Fatal(err)
	}
	if ok, ready := ifState(t, k, ifindex); !ok || ready {
		t.Fatalf("after the old endpoint's removal the new interface has ifstate %v ready %v, want not ready (failed closed)", ok, ready)
	}
	if _, attached := k.datapath().AttachedCurrent(ifindex, w.HostIface); !attached {
		t.Fatal("after the old endpoint's removal the new interface has no entry programs")
	}
}

// programmedPair creates workloads at ipA and ipB, waits until the monitor
// knows both, and applies an allow-all endpoint to a and epB(b) to b.
func programmedPair(t *testing.T, k *Kernel, ipA, ipB string, epB func(b *testutil.Workload) *model.Endpoint) (a, b *testutil.Workload) {
	t.Helper()
	a, b = newWorkload(t, ipA), newWorkload(t, ipB)
	testutil.WaitFor(t, 5*time.Second, "monitor sees both interfaces", func() bool {
		_, okA := k.mon.Ifindex(a.HostIface)
		_, okB := k.mon.Ifindex(b.HostIface)
		return okA && okB && k.Link(a.HostIface) == model.LinkUp && k.Link(b.HostIface) == model.LinkUp
	})
	for _, ep := range []*model.Endpoint{allowAllEndpoint(a, 0), epB(b)} {
		if err := applyKnown(t, k, ep); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}
