package linux

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// seedEarlierDpd leaves in f what an earlier dpd (and a crash of it)
// would have left: cali1 programmed (the controller sends it again),
// cali2 programmed (it does not), cali3 failed closed, cali4 carrying our
// legacy entry programs with nothing recorded, cali5 another dpd's, cali6
// our pinned TCX links but no dpd_ifstate entry (a crash between the
// two), eth0 not a
// workload interface, and the state of a vanished interface (cali9),
// an orphan jump slot, a stray program pin, chain entries, counters and
// an IP set nobody wants.
func seedEarlierDpd(f *fakeKernel) {
	ifs := map[string]int{}
	for _, n := range []string{"cali1", "cali2", "cali3", "cali4", "cali5", "cali6", "eth0"} {
		ifs[n] = f.addLink(n)
	}
	web := f.pinProg(model.Ingress, "allow-web")
	all := f.pinProg(model.Egress, "allow-all")
	old := f.pinProg(model.Ingress, "old")
	ready := uint32(abi.IfWorkload | abi.IfReady)
	program := func(name string, slot uint32, in, out *fakeProg, addr byte) {
		idx := ifs[name]
		f.attached[idx] = tcbpf.AttachTCX
		f.linkPins[name] = true
		f.ifstate[idx] = tcbpf.IfStateEntry{Slot: slot, Flags: ready}
		f.jump[[2]uint32{slot, uint32(model.Ingress)}] = in.id
		f.jump[[2]uint32{slot, uint32(model.Egress)}] = out.id
		f.nets[name] = []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, addr}), 32)}
	}
	program("cali1", 0, web, all, 1)
	program("cali2", 1, old, all, 2)
	f.attached[ifs["cali3"]] = tcbpf.AttachTCX
	f.linkPins["cali3"] = true
	f.ifstate[ifs["cali3"]] = tcbpf.IfStateEntry{Slot: 0, Flags: abi.IfWorkload}
	f.attached[ifs["cali4"]] = tcbpf.AttachTC
	f.foreign[ifs["cali5"]] = true
	f.attached[ifs["cali6"]] = tcbpf.AttachTCX
	f.linkPins["cali6"] = true
	f.attached[ifs["eth0"]] = tcbpf.AttachTCX
	f.ifstate[99] = tcbpf.IfStateEntry{Slot: 2, Flags: ready}
	f.linkPins["cali9"] = true
	f.jump[[2]uint32{7, uint32(model.Ingress)}] = old.id
	f.pins[fakeProgsDir+"/garbage"] = 0
	f.chain[5] = true
	f.counters[1], f.counters[2] = true, true
	f.ipsets["s-old"], f.ipsets["s-new"] = true, true
}

// Restart and garbage collection, step by step: the start adopts without
// writing; the controller's unchanged endpoint is claimed without writing;
// nothing is collected before the first apply ends; then exactly what no
// one claimed goes, without a detach: the endpoint the controller no
// longer sends is removed as RemoveEndpoint removes it (failed closed, its
// route and policies gone), workload interfaces carrying dpd's programs
// with no record are failed closed, and the pins of a vanished interface
// go; what is not dpd's (another dpd's programs, a non-workload interface)
// stays.
func TestCollectGarbageGolden(t *testing.T) {
	f := newFakeKernel(t)
	seedEarlierDpd(f)
	tr := &transcript{f: f}
	var k *Kernel
	tr.step(t, "start: adopt what is there, write nothing", func() error {
		k = f.kernel()
		k.gc.knownSets["s-new"] = true // the snapshot re-sent this set
		return nil
	})
	tr.step(t, "cali1 re-sent unchanged: claimed, nothing written", func() error {
		return k.ApplyEndpoint(f.endpoint("cali1", 1, "allow-web", "allow-all"))
	})
	tr.step(t, "collection before the first apply ended: nothing", func() error {
		r, err := k.CollectGarbage()
		if r.Total() != 0 {
			t.Errorf("collected %+v before the first apply ended", r)
		}
		return err
	})
	tr.step(t, "first apply ends: what nobody claimed is collected", k.EndApply)
	tr.step(t, "the next collection: nothing left", func() error {
		r, err := k.CollectGarbage()
		if r.Total() != 0 {
			t.Errorf("second collection removed %+v", r)
		}
		return err
	})
	tr.check(t, goldenCollectGarbage)
}

const goldenCollectGarbage = `== start: adopt what is there, write nothing
  | chain 5
  | counter 1
  | counter 2
  | ifstate #99 slot=2 flags=0x3 (no interface)
  | ipset s-new
  | ipset s-old
  | jump slot=7 dir=1 ingress:old (no ready interface)
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:old nets=[10.0.0.2/32]
  | link cali3 attached=tcx closed
  | link cali4 attached=tc
  | link cali5 foreign
  | link cali6 attached=tcx
  | link eth0 attached=tcx
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | linkpin cali6
  | linkpin cali9
  | pindir garbage (no program)
  | prog egress:allow-all pinned
  | prog ingress:allow-web pinned
  | prog ingress:old pinned
== cali1 re-sent unchanged: claimed, nothing written
  | chain 5
  | counter 1
  | counter 2
  | ifstate #99 slot=2 flags=0x3 (no interface)
  | ipset s-new
  | ipset s-old
  | jump slot=7 dir=1 ingress:old (no ready interface)
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:old nets=[10.0.0.2/32]
  | link cali3 attached=tcx closed
  | link cali4 attached=tc
  | link cali5 foreign
  | link cali6 attached=tcx
  | link eth0 attached=tcx
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | linkpin cali6
  | linkpin cali9
  | pindir garbage (no program)
  | prog egress:allow-all pinned
  | prog ingress:allow-web pinned
  | prog ingress:old pinned
== collection before the first apply ended: nothing
  | chain 5
  | counter 1
  | counter 2
  | ifstate #99 slot=2 flags=0x3 (no interface)
  | ipset s-new
  | ipset s-old
  | jump slot=7 dir=1 ingress:old (no ready interface)
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:old nets=[10.0.0.2/32]
  | link cali3 attached=tcx closed
  | link cali4 attached=tc
  | link cali5 foreign
  | link cali6 attached=tcx
  | link eth0 attached=tcx
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | linkpin cali6
  | linkpin cali9
  | pindir garbage (no program)
  | prog egress:allow-all pinned
  | prog ingress:allow-web pinned
  | prog ingress:old pinned
== first apply ends: what nobody claimed is collected
  SyncMasquerade [] []
  SetIfState cali2 slot=0 flags=0x2
  UnconfigureEndpoint cali2 [10.0.0.2/32]
  ClearPolicy slot=1 dir=1
  Release ingress:old
  ClearPolicy slot=1 dir=0
  SetIfState cali6 slot=0 flags=0x2
  RemoveLinkPins cali9
  Attach cali4
  SetIfState cali4 slot=0 flags=0x2
  DeleteIfState #99
  ClearPolicy slot=7 dir=1
  DeleteChainIndex 5
  RemovePinDir garbage
  DeleteCounters [1 2]
  RemoveIPSet s-old
  | ipset s-new
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx closed
  | link cali3 attached=tcx closed
  | link cali4 attached=tcx closed
  | link cali5 foreign
  | link cali6 attached=tcx closed
  | link eth0 attached=tcx
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | linkpin cali4
  | linkpin cali6
  | prog egress:allow-all pinned
  | prog ingress:allow-web pinned
== the next collection: nothing left
  | ipset s-new
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx closed
  | link cali3 attached=tcx closed
  | link cali4 attached=tcx closed
  | link cali5 foreign
  | link cali6 attached=tcx closed
  | link eth0 attached=tcx
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | linkpin cali4
  | linkpin cali6
  | prog egress:allow-all pinned
  | prog ingress:allow-web pinned
`

// A read that fails during garbage collection removes nothing it would
// have decided on: errors are not "absent". Each case fails one read and
// names the removals that must not happen; the collection reports the
// error.
func TestCollectGarbageReadErrorsRemoveNothing(t *testing.T) {
	eperm := unix.EPERM
	for _, tc := range []struct {
		read   string
		forbid []string // operations (prefixes) that must not happen
	}{
		{"EntryOwners", []string{"Detach cali4", "Detach cali5", "Detach cali6", "Detach eth0", "RemoveLinkPins cali6"}},
		{"ListDpdRoutes", []string{"SetIfState cali2", "UnconfigureEndpoint cali2", "DeleteIfState cali2", "ClearPolicy slot=1", "Detach"}},
		{"Links", []string{"Detach cali4"}},
		{"IfStates", []string{"DeleteIfState #99"}},
		{"Policies", []string{"ClearPolicy slot=7"}},
		{"PinnedLinks", []string{"RemoveLinkPins"}},
		{"PinnedNames", []string{"RemovePinDir"}},
		{"CounterIDs", []string{"DeleteCounters"}},
		{"ChainIndices", []string{"DeleteChainIndex"}},
	} {
		t.Run(tc.read, func(t *testing.T) {
			f := newFakeKernel(t)
			seedEarlierDpd(f)
			k := f.kernel()
			if err := k.ApplyEndpoint(f.endpoint("cali1", 1, "allow-web", "allow-all")); err != nil {
				t.Fatal(err)
			}
			f.take()
			f.fail[tc.read] = eperm
			err := k.EndApply()
			if !errors.Is(err, eperm) {
				t.Errorf("EndApply = %v, want the %s error", err, tc.read)
			}
			ops := f.take()
			for _, o := range ops {
				for _, bad := range tc.forbid {
					if strings.HasPrefix(o, bad) {
						t.Errorf("with %s failing, the collection did %q", tc.read, o)
					}
				}
			}
			// cali1 and cali3 stay as they were whatever fails.
			dump := f.dump()
			for _, want := range []string{
				"link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]",
				"link cali3 attached=tcx closed",
				"link cali5 foreign",
				"link eth0 attached=tcx",
			} {
				if !slices.Contains(strings.Split(dump, "\n"), want) {
					t.Errorf("lost %q:\n%s", want, dump)
				}
			}
		})
	}
}

// Not knowing whose programs an interface carries must not leave it open:
// it is failed closed as if nothing were attached.
func TestFailCloseOwnerErrorStillCloses(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	f.fail["EntryOwners"] = unix.EPERM
	f.addLink("cali1")
	k.onLink(linkUp("cali1"))
	k.drainAttaches()
	if got, want := f.dump(), "link cali1 attached=tcx closed\nlinkpin cali1\n"; got != want {
		t.Errorf("state:\n%swant:\n%s", got, want)
	}
	if n := f.count("Attach"); n != 1 {
		t.Errorf("%d attaches, want 1", n)
	}
}

// A failing interface lookup at start is not a vanished interface: the
// start fails instead of leaving its state for collection.
func TestAdoptLinkErrorFailsStart(t *testing.T) {
	f := newFakeKernel(t)
	seedEarlierDpd(f)
	f.fail["LinkName"] = unix.EPERM
	k := newKernel(Options{Log: quietLog(), GCInterval: DefaultGCInterval}, netFacilities{links: f, endpoint: f, routes: fakeRouteNet{f}, tunnel: f, masq: f})
	err := k.attachBPFLocked(bpfFacilities{entry: f, programs: f, sweep: f, routes: f, nat: f}, 64)
	if !errors.Is(err, unix.EPERM) {
		t.Fatalf("start = %v, want the lookup error", err)
	}
	if ops := f.take(); len(ops) != 0 {
		t.Errorf("a failed start wrote %q", ops)
	}
}
