package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

func mustApply(t *testing.T, k *Kernel, eps ...*model.Endpoint) {
	t.Helper()
	for _, ep := range eps {
		waitLinkKnown(t, k, ep.Iface)
		if err := k.ApplyEndpoint(ep); err != nil {
			t.Fatalf("apply %s: %v", ep.Iface, err)
		}
	}
	if err := k.EndApply(); err != nil {
		t.Fatalf("end apply: %v", err)
	}
}

// waitLinkKnown waits, for an interface that exists, until k's view of
// the links (the monitor's cache while WatchLinks runs) has it up: an
// endpoint applied before is programmed only when the monitor reports its
// interface, which the engine does on the link update and these tests,
// which call the kernel directly, would not.
func waitLinkKnown(t *testing.T, k *Kernel, iface string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("/sys/class/net", iface)); err != nil {
		return // absent on purpose
	}
	testutil.WaitFor(t, 5*time.Second, iface+" known to the link monitor", func() bool { return k.Link(iface) == model.LinkUp })
}

// applyKnown applies ep once k knows its interface (see waitLinkKnown).
func applyKnown(t *testing.T, k *Kernel, ep *model.Endpoint) error {
	t.Helper()
	waitLinkKnown(t, k, ep.Iface)
	return k.ApplyEndpoint(ep)
}

// TestRestartAdoptsWithoutWrites: a dpd that stops and starts again on the
// same pins adopts what the first one programmed: while it waits, and when
// the same endpoints are applied again, nothing is loaded, installed,
// attached or written (a split policy included), and a 100 pps ping across
// the whole restart loses nothing. A changed endpoint afterwards costs
// exactly one program load and one jump write.
func TestRestartAdoptsWithoutWrites(t *testing.T) {
	for i, legacy := range []bool{false, true} {
		name := map[bool]string{false: "tcx", true: "legacy-tc"}[legacy]
		t.Run(name, func(t *testing.T) { testRestartAdopts(t, legacy, i) })
	}
}

func testRestartAdopts(t *testing.T, legacy bool, n int) {
	pin := newPinDir(t)
	opts := Options{PinDir: pin, ForceLegacyTC: legacy}
	k1 := openKernelWith(t, opts)
	a, b := newWorkload(t, fmt.Sprintf("10.77.%d.1", 10+n)), newWorkload(t, fmt.Sprintf("10.77.%d.2", 10+n))
	epA := allowAllEndpoint(a, 1)
	epB := endpointFor(b, 2, bigPolicy(), allowAll())
	mustApply(t, k1, epA, epB)
	testutil.WaitFor(t, 5*time.Second, "a pings b", func() bool { return pingsQuick(a, b.IP) })
	if idx, err := k1.datapath().ChainIndices(); err != nil || len(idx) == 0 {
		t.Fatalf("the big policy should be split into chained chunks: %v %v", idx, err)
	}
	slotB, _ := k1.Endpoint(b.HostIface)

	ping := a.StartPing(b.IP, 300)
	waitFlowing(t, k1)
	if err := k1.Close(); err != nil {
		t.Fatal(err)
	}
	k2 := openKernelWith(t, opts)
	before := k2.Ops()
	if before.Writes() != 0 {
		t.Fatalf("starting on adopted pins wrote: %+v", before)
	}
	adopted, ok := k2.Endpoint(b.HostIface)
	if !ok || !adopted.Ready || adopted.Slot != slotB.Slot {
		t.Fatalf("adopted b: %+v (ok %v), want ready in slot %d", adopted, ok, slotB.Slot)
	}
	mustApply(t, k2, epA, epB)
	ops := k2.Ops().Sub(before)
	if ops.Writes() != 0 || ops.FailClosed != 0 {
		t.Errorf("re-applying unchanged endpoints after a restart wrote: %+v", ops)
	}
	if ops.ProgramAdopts != 3 {
		t.Errorf("adopted %d programs, want 3 (allow in, allow out, big in)", ops.ProgramAdopts)
	}
	if sent, recv := ping.Wait(t, pingTimeout); recv != sent {
		t.Errorf("ping across the restart: %d sent, %d received, %d lost", sent, recv, sent-recv)
	} else {
		t.Logf("ping across the restart: %d sent, %d received", sent, recv)
	}
	if d, _ := k2.Endpoint(b.HostIface); d.Slot != slotB.Slot || d.IngressProgram != slotB.IngressProgram {
		t.Errorf("b after the restart: %+v, before: %+v", d, slotB)
	}

	// The adopted split policy still decides: ICMP allowed, others not.
	if !pingsQuick(a, b.IP) {
		t.Error("ping a -> b fails after the restart")
	}

	// A change is an in-place swap: one load, one jump write.
	before = k2.Ops()
	epB2 := endpointFor(b, 2, allowAll(), allowAll())
	mustApply(t, k2, epB2)
	ops = k2.Ops().Sub(before)
	if ops.ProgramLoads != 0 || ops.JumpWrites != 1 || ops.Attaches != 0 || ops.IfStateWrites != 0 || ops.Netlink.Writes() != 0 {
		t.Errorf("switching b's ingress to an already loaded program: %+v; want 1 jump write only", ops)
	}
	// The big program's pins went with its last user.
	dirs, _ := os.ReadDir(filepath.Join(pin, "progs"))
	if len(dirs) != 2 {
		t.Errorf("%d pinned programs after the swap, want 2: %v", len(dirs), dirs)
	}
}

// TestRestartResizeMigrates: a restart whose ConfigUpdate asks for a bigger
// conntrack map migrates the map with its entries and updates the entry
// programs in place; traffic never stops.
func TestRestartResizeMigrates(t *testing.T) {
	pin := newPinDir(t)
	k1 := openKernel(t, pin)
	a, b := newWorkload(t, "10.77.1.1"), newWorkload(t, "10.77.1.2")
	epA, epB := allowAllEndpoint(a, 1), allowAllEndpoint(b, 2)
	mustApply(t, k1, epA, epB)
	testutil.WaitFor(t, 5*time.Second, "a pings b", func() bool { return pingsQuick(a, b.IP) })
	ping := a.StartPing(b.IP, 300)
	waitFlowing(t, k1)
	if err := k1.Close(); err != nil {
		t.Fatal(err)
	}
	k2 := openKernel(t, pin)
	before := k2.Ops()
	if err := k2.Configure(map[string]string{"InterfacePrefix": testPrefix, "BPFMapSizeConntrack": "600000"}); err != nil {
		t.Fatal(err)
	}
	if got := k2.datapath().Maps().Conntrack.MaxEntries(); got != 600000 {
		t.Fatalf("conntrack has %d entries after the resize, want 600000", got)
	}
	migrated := false
	for _, m := range k2.datapath().Migrations() {
		migrated = migrated || (m.Replaced && m.Copied > 0)
	}
	if !migrated {
		t.Errorf("no map migrated with its entries: %+v", k2.datapath().Migrations())
	}
	mustApply(t, k2, epA, epB)
	ops := k2.Ops().Sub(before)
	if ops.Attaches != 2 || ops.Detaches != 0 || ops.IfStateWrites != 0 {
		t.Errorf("resize: %+v; want the two entry attachments updated in place and nothing else", ops)
	}
	if sent, recv := ping.Wait(t, pingTimeout); recv != sent {
		t.Errorf("ping across the resize: %d sent, %d received, %d lost", sent, recv, sent-recv)
	} else {
		t.Logf("ping across the resize: %d sent, %d received", sent, recv)
	}
}
