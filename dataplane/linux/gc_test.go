package linux

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// entryProgs lists the programs attached to ifindex's TCX hooks and clsact
// filters.
func entryProgs(t *testing.T, ifindex int) int {
	t.Helper()
	n := 0
	for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: at})
		if err != nil {
			t.Fatal(err)
		}
		n += len(res.Programs)
	}
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		t.Fatal(err)
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := netlink.FilterList(l, parent)
		if err == nil {
			n += len(fs)
		}
	}
	return n
}

// addStrayFilter attaches prog as a legacy tc filter the way dpd's legacy
// mode does, without any record of it: what a crash can leave.
func addStrayFilter(t *testing.T, ifindex int, prog *ebpf.Program) {
	t.Helper()
	q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
	if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		t.Fatal(err)
	}
	f := &netlink.BpfFilter{
		FilterAttrs:  netlink.FilterAttrs{LinkIndex: ifindex, Parent: netlink.HANDLE_MIN_INGRESS, Handle: 0xd9d, Priority: 1, Protocol: unix.ETH_P_ALL},
		Fd:           prog.FD(),
		Name:         "dpd_from_wep",
		DirectAction: true,
	}
	if err := netlink.FilterReplace(f); err != nil {
		t.Fatal(err)
	}
}

// TestRestartCollectsGarbage: after a restart, the first apply claims the
// endpoints the controller still sends; collection then removes the one it
// no longer sends (policy programs, route, slot; its interface stays
// failed closed with dpd's entry programs, nothing is detached) and every
// kind of debris a crash can leave, while the live endpoints' traffic
// flows on.
func TestRestartCollectsGarbage(t *testing.T) {
	pin := newPinDir(t)
	k1 := openKernel(t, pin)
	a, b, c := newWorkload(t, "10.77.2.1"), newWorkload(t, "10.77.2.2"), newWorkload(t, "10.77.2.3")
	gone, stray := newWorkload(t, "10.77.2.4"), newWorkload(t, "10.77.2.5")
	epA, epB := allowAllEndpoint(a, 1), allowAllEndpoint(b, 2)
	epC := endpointFor(c, 3, bigPolicy(), allowAll())
	epGone := allowAllEndpoint(gone, 4)
	mustApply(t, k1, epA, epB, epC, epGone)
	testutil.WaitFor(t, 5*time.Second, "a pings b and c", func() bool { return pingsQuick(a, b.IP) && pingsQuick(a, c.IP) })
	cState, _ := k1.Endpoint(c.HostIface)
	goneIfindex := ifindexOf(t, gone.HostIface)

	// Debris: an interface that vanished with its state, an entry program
	// nobody recorded, and stray map entries and pins.
	testutil.Run(t, "ip", "link", "del", gone.HostIface)
	strayIfindex := ifindexOf(t, stray.HostIface)
	addStrayFilter(t, strayIfindex, k1.datapath().Programs().FromWEP)
	d := k1.datapath()
	k1.mu.Lock()
	head := k1.eps.eps[a.HostIface].inst[model.Ingress].prog.Head()
	k1.mu.Unlock()
	mustNil(t, d.SetIfState(999999, 5, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(900, 0, head))
	mustNil(t, d.Maps().Chain.Update(uint32(8000), head, ebpf.UpdateAny))
	mustNil(t, d.EnsureCounters([]uint64{0xdead}))
	mustNil(t, d.ReplaceIPSet("stale-set", model.IPSetNet, []model.IPSetMember{{Prefix: mustPrefix("10.99.0.0/16")}}))
	mustNil(t, os.MkdirAll(filepath.Join(pin, "progs", "ingress-zz"), 0o700))
	mustNil(t, k1.Close())

	k2 := openKernel(t, pin)
	ping := a.StartPing(b.IP, 200)
	waitFlowing(t, k2)
	mustApply(t, k2, epA, epB)
	if sent, recv := ping.Wait(t, pingTimeout); recv != sent {
		t.Errorf("a -> b during the collection: %d sent, %d received", sent, recv)
	}

	// c's endpoint is gone; its interface, which still exists, keeps only
	// dpd's entry programs (and the pins that hold them), failed closed.
	if d, ok := k2.Endpoint(c.HostIface); !ok || d.Ready || d.IngressProgram != "" || d.EgressProgram != "" {
		t.Errorf("c: %+v (tracked %v), want tracked, not ready, no policy", d, ok)
	}
	if ok, ready := ifState(t, k2, ifindexOf(t, c.HostIface)); !ok || ready {
		t.Errorf("c's ifstate present %v ready %v, want present and not ready", ok, ready)
	}
	if n := entryProgs(t, ifindexOf(t, c.HostIface)); n != 2 {
		t.Errorf("%d programs attached to c, want dpd's 2 entry programs", n)
	}
	if pins, _ := filepath.Glob(filepath.Join(pin, "links", c.HostIface+"_*")); len(pins) != 2 {
		t.Errorf("c's link pins %v, want the 2 that hold its entry programs", pins)
	}
	if pingsQuick(a, c.IP) {
		t.Error("a reaches c after c's endpoint was collected: c must drop")
	}
	if out := testutil.Run(t, "ip", "route", "show", c.IP); out != "" {
		t.Errorf("c's route left: %q", out)
	}
	pols, err := k2.datapath().Policies()
	mustNil(t, err)
	for _, p := range pols {
		if p.Slot == cState.Slot || p.Slot == 900 {
			t.Errorf("dpd_jump still holds a policy in slot %d", p.Slot)
		}
	}
	// The debris is gone.
	states, err := k2.datapath().IfStates()
	mustNil(t, err)
	for _, ifi := range []int{999999, goneIfindex} {
		if _, ok := states[ifi]; ok {
			t.Errorf("ifstate of vanished ifindex %d left", ifi)
		}
	}
	if pins, _ := filepath.Glob(filepath.Join(pin, "links", gone.HostIface+"_*")); len(pins) != 0 {
		t.Errorf("link pins of a vanished interface left: %v", pins)
	}
	// The interface carrying an unrecorded entry program is a workload
	// interface: failed closed, not detached (it would pass unpoliced).
	if ok, ready := ifState(t, k2, strayIfindex); !ok || ready {
		t.Errorf("stray interface's ifstate present %v ready %v, want failed closed", ok, ready)
	}
	if n := entryProgs(t, strayIfindex); n != 2 {
		t.Errorf("stray interface carries %d programs, want dpd's 2 entry programs", n)
	}
	idx, err := k2.datapath().ChainIndices()
	mustNil(t, err)
	if slices.Contains(idx, 8000) || len(idx) != 0 {
		t.Errorf("dpd_chain entries left: %v (the only split policy was c's)", idx)
	}
	ctrs, err := k2.datapath().CounterIDs()
	mustNil(t, err)
	if slices.Contains(ctrs, 0xdead) {
		t.Error("stray rule counter left")
	}
	if _, ok := k2.datapath().SetID("stale-set"); ok {
		t.Error("unknown IP set left")
	}
	dirs, _ := os.ReadDir(filepath.Join(pin, "progs"))
	if len(dirs) != 2 {
		t.Errorf("pinned programs %v, want the 2 a and b share", dirs)
	}
	// Live endpoints are untouched and a second collection finds nothing.
	if !pingsQuick(a, b.IP) || !pingsQuick(b, a.IP) {
		t.Error("a and b cannot reach each other after the collection")
	}
	before := k2.Ops()
	r, err := k2.CollectGarbage()
	mustNil(t, err)
	if r.Total() != 0 || k2.Ops().Sub(before).Writes() != 0 {
		t.Errorf("second collection: %+v, ops %+v", r, k2.Ops().Sub(before))
	}
}

// TestNoCollectionBeforeFirstApply: until the first apply after InSync,
// a restarted dpd removes nothing, even what nobody will claim.
func TestNoCollectionBeforeFirstApply(t *testing.T) {
	pin := newPinDir(t)
	k1 := openKernel(t, pin)
	a, b := newWorkload(t, "10.77.3.1"), newWorkload(t, "10.77.3.2")
	mustApply(t, k1, allowAllEndpoint(a, 1), allowAllEndpoint(b, 2))
	mustNil(t, k1.Close())
	k2 := openKernel(t, pin)
	r, err := k2.CollectGarbage()
	mustNil(t, err)
	if r.Total() != 0 || k2.Ops().Writes() != 0 {
		t.Fatalf("collection before the first apply: %+v, ops %+v", r, k2.Ops())
	}
	testutil.WaitFor(t, 5*time.Second, "a pings b on adopted state", func() bool { return pingsQuick(a, b.IP) })
}

// TestPeriodicCollection: once the first apply is done, collection keeps
// running on its own and removes what turns up later.
func TestPeriodicCollection(t *testing.T) {
	k := openKernelWith(t, Options{PinDir: newPinDir(t), GCInterval: 20 * time.Millisecond})
	watch(t, k)
	a := newWorkload(t, "10.77.6.1")
	mustApply(t, k, allowAllEndpoint(a, 1))
	mustNil(t, k.datapath().SetIfState(999998, 7, abi.IfReady))
	testutil.WaitFor(t, 5*time.Second, "the stray ifstate entry collected", func() bool {
		ok, _ := ifState(t, k, 999998)
		return !ok
	})
	if ok, ready := ifState(t, k, ifindexOf(t, a.HostIface)); !ok || !ready {
		t.Errorf("the live endpoint's ifstate entry was touched: ok %v ready %v", ok, ready)
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
