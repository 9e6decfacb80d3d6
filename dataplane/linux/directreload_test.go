package linux

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// testNow is the stopped clock of testReloader: no grace ends by itself.
var testNow = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

// testReloader installs a direct reloader without its goroutine, on a
// stopped clock: the test runs its steps and ends its graces.
func testReloader(k *Kernel) *directReloader {
	r := &directReloader{wake: make(chan struct{}, 1), stop: make(chan struct{}), now: func() time.Time { return testNow }}
	k.mu.Lock()
	k.reloader = r
	k.mu.Unlock()
	return r
}

// reloadAll runs the worker's steps until the queue is empty.
func reloadAll(k *Kernel, r *directReloader) {
	for {
		k.mu.Lock()
		k.lastApply = time.Time{} // no quiet period to wait for
		k.mu.Unlock()
		more, wait := k.reloadOne(r)
		if wait > 0 {
			panic("reloadAll: the engine is not quiet")
		}
		if !more {
			return
		}
	}
}

// reloadSettled is reloadAll followed by the end of the grace.
func reloadSettled(k *Kernel, r *directReloader) {
	reloadAll(k, r)
	k.mu.Lock()
	defer k.mu.Unlock()
	r.closeRetired(k.log, time.Time{})
}

// The direct reloader on a datapath that calls the epilogue directly: the
// endpoint's path loads with the indirect call (no text patching), then
// each program in use is loaded again directly and written into every
// slot that runs it (the group's shared slot once), its pin moves, and
// the old one closes after the grace. A program that went during the
// reload is not installed; a failed write keeps the old program; an
// endpoint taking a reloaded program loads nothing.
func TestDirectReloadGolden(t *testing.T) {
	f := newFakeKernel(t)
	f.direct = true
	k := f.kernel()
	r := testReloader(k)
	tr := &transcript{f: f}
	ep1 := groupEndpoint(f, "cali1", 1, "allow-web", "web")
	ep2 := groupEndpoint(f, "cali2", 2, "allow-web", "web")
	ep3 := f.endpoint("cali3", 3, "allow-db", "allow-all")
	for _, n := range []string{"cali1", "cali2", "cali3"} {
		f.addLink(n)
	}
	tr.step(t, "three endpoints, two in a group: indirect loads on their path", func() error {
		for _, ep := range []*model.Endpoint{ep1, ep2, ep3} {
			if err := k.ApplyEndpoint(ep); err != nil {
				return err
			}
		}
		return k.EndApply()
	})
	if got := len(r.wake); got != 1 {
		t.Errorf("EndApply woke the reloader %d times, want 1", got)
	}
	tr.step(t, "reload: each program loaded directly and written where it runs", func() error {
		reloadAll(k, r)
		return nil
	})
	tr.step(t, "after the grace the replaced programs close", func() error {
		k.mu.Lock()
		defer k.mu.Unlock()
		r.closeRetired(k.log, time.Time{})
		return nil
	})
	if got := k.Ops().ProgramReloads; got != 3 {
		t.Errorf("%d programs reloaded, want 3", got)
	}
	tr.step(t, "an endpoint taking a reloaded program: nothing loaded", func() error {
		f.addLink("cali4")
		err := k.ApplyEndpoint(groupEndpoint(f, "cali4", 4, "allow-web", "web"))
		reloadSettled(k, r)
		return err
	})
	ep3b := withIngress(f, ep3, "allow-dns")
	tr.step(t, "the program goes while it reloads: the new one is closed, not installed", func() error {
		if err := k.ApplyEndpoint(ep3b); err != nil {
			return err
		}
		f.loadDirectHook = func() {
			if err := k.ApplyEndpoint(withIngress(f, ep3, "allow-ssh")); err != nil {
				t.Error(err)
			}
		}
		reloadSettled(k, r)
		f.loadDirectHook = nil
		return nil
	})
	tr.step(t, "a failed write keeps the old program", func() error {
		if err := k.ApplyEndpoint(withIngress(f, ep3, "allow-ntp")); err != nil {
			return err
		}
		f.loadDirectHook = func() { f.fail["InstallPolicy"] = errors.New("ENOMEM") }
		defer func() { f.loadDirectHook = nil; delete(f.fail, "InstallPolicy") }()
		reloadSettled(k, r)
		return nil
	})
	tr.step(t, "stopped within the grace: the replaced program is let go, not closed (its chain stays for packets inside it)", func() error {
		if err := k.ApplyEndpoint(withIngress(f, ep3, "allow-smtp")); err != nil {
			return err
		}
		if err := k.EndApply(); err != nil {
			return err
		}
		reloadAll(k, r)
		k.mu.Lock()
		defer k.mu.Unlock()
		k.stopReloaderLocked()
		return nil
	})
	tr.check(t, goldenDirectReload)
}

const goldenDirectReload = `== three endpoints, two in a group: indirect loads on their path
  Attach cali1
  SetIfState cali1 slot=0 flags=0x2
  Load ingress:allow-web
  Pin ingress:allow-web
  InstallPolicy slot=0 dir=1 ingress:allow-web
  Load egress:allow-all
  Pin egress:allow-all
  InstallPolicy slot=0 dir=0 egress:allow-all
  SetIfState cali1 slot=0 flags=0x3
  ConfigureEndpoint cali1 [10.0.0.1/32]
  Attach cali2
  SetIfState cali2 slot=0 flags=0x2
  SetIfState cali2 slot=0 flags=0x3
  ConfigureEndpoint cali2 [10.0.0.2/32]
  Attach cali3
  SetIfState cali3 slot=1 flags=0x2
  Load ingress:allow-db
  Pin ingress:allow-db
  InstallPolicy slot=1 dir=1 ingress:allow-db
  InstallPolicy slot=1 dir=0 egress:allow-all
  SetIfState cali3 slot=1 flags=0x3
  ConfigureEndpoint cali3 [10.0.0.3/32]
  SyncMasquerade [] []
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | link cali3 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.3/32]
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
  | prog ingress:allow-web pinned
== reload: each program loaded directly and written where it runs
  LoadDirect ingress:allow-web
  InstallPolicy slot=0 dir=1 ingress:allow-web
  Unpin ingress:allow-web
  Pin ingress:allow-web
  LoadDirect egress:allow-all
  InstallPolicy slot=0 dir=0 egress:allow-all
  InstallPolicy slot=1 dir=0 egress:allow-all
  Unpin egress:allow-all
  Pin egress:allow-all
  LoadDirect ingress:allow-db
  InstallPolicy slot=1 dir=1 ingress:allow-db
  Unpin ingress:allow-db
  Pin ingress:allow-db
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | link cali3 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.3/32]
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | prog egress:allow-all
  | prog egress:allow-all pinned direct
  | prog ingress:allow-db
  | prog ingress:allow-db pinned direct
  | prog ingress:allow-web
  | prog ingress:allow-web pinned direct
== after the grace the replaced programs close
  Close ingress:allow-web
  Close egress:allow-all
  Close ingress:allow-db
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | link cali3 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.3/32]
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | prog egress:allow-all pinned direct
  | prog ingress:allow-db pinned direct
  | prog ingress:allow-web pinned direct
== an endpoint taking a reloaded program: nothing loaded
  Attach cali4
  SetIfState cali4 slot=0 flags=0x2
  SetIfState cali4 slot=0 flags=0x3
  ConfigureNewEndpoint cali4 [10.0.0.4/32]
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | link cali3 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.3/32]
  | link cali4 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.4/32]
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | linkpin cali4
  | prog egress:allow-all pinned direct
  | prog ingress:allow-db pinned direct
  | prog ingress:allow-web pinned direct
== the program goes while it reloads: the new one is closed, not installed
  Load ingress:allow-dns
  Pin ingress:allow-dns
  InstallPolicy slot=1 dir=1 ingress:allow-dns
  Close ingress:allow-db
  Unpin ingress:allow-db
  Load ingress:allow-ssh
  Pin ingress:allow-ssh
  InstallPolicy slot=1 dir=1 ingress:allow-ssh
  Close ingress:allow-dns
  Unpin ingress:allow-dns
  LoadDirect ingress:allow-dns
  Close ingress:allow-dns
  LoadDirect ingress:allow-ssh
  InstallPolicy slot=1 dir=1 ingress:allow-ssh
  Unpin ingress:allow-ssh
  Pin ingress:allow-ssh
  Close ingress:allow-ssh
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | link cali3 attached=tcx ready egress:allow-all ingress:allow-ssh nets=[10.0.0.3/32]
  | link cali4 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.4/32]
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | linkpin cali4
  | prog egress:allow-all pinned direct
  | prog ingress:allow-ssh pinned direct
  | prog ingress:allow-web pinned direct
== a failed write keeps the old program
  Load ingress:allow-ntp
  Pin ingress:allow-ntp
  InstallPolicy slot=1 dir=1 ingress:allow-ntp
  Close ingress:allow-ssh
  Unpin ingress:allow-ssh
  LoadDirect ingress:allow-ntp
  Close ingress:allow-ntp
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | link cali3 attached=tcx ready egress:allow-all ingress:allow-ntp nets=[10.0.0.3/32]
  | link cali4 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.4/32]
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | linkpin cali4
  | prog egress:allow-all pinned direct
  | prog ingress:allow-ntp pinned
  | prog ingress:allow-web pinned direct
== stopped within the grace: the replaced program is let go, not closed (its chain stays for packets inside it)
  Load ingress:allow-smtp
  Pin ingress:allow-smtp
  InstallPolicy slot=1 dir=1 ingress:allow-smtp
  Close ingress:allow-ntp
  Unpin ingress:allow-ntp
  LoadDirect ingress:allow-smtp
  InstallPolicy slot=1 dir=1 ingress:allow-smtp
  Unpin ingress:allow-smtp
  Pin ingress:allow-smtp
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | link cali3 attached=tcx ready egress:allow-all ingress:allow-smtp nets=[10.0.0.3/32]
  | link cali4 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.4/32]
  | linkpin cali1
  | linkpin cali2
  | linkpin cali3
  | linkpin cali4
  | prog egress:allow-all pinned direct
  | prog ingress:allow-smtp pinned direct
  | prog ingress:allow-web pinned direct
`

// The reloader starts no load within reloadQuiet of the engine's last
// apply: a pass's own loads must not wait for its text patching.
func TestDirectReloadWaitsForQuiet(t *testing.T) {
	f := newFakeKernel(t)
	f.direct = true
	k := f.kernel()
	r := testReloader(k)
	f.addLink("cali1")
	if err := k.ApplyEndpoint(f.endpoint("cali1", 1, "allow-web", "allow-all")); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	k.lastApply = testNow // the apply, on the reloader's clock
	k.mu.Unlock()
	more, wait := k.reloadOne(r)
	if !more || wait != reloadQuiet || f.count("LoadDirect") != 0 {
		t.Fatalf("right after an apply: more %v, wait %v, %d loads; want to wait %v and load nothing", more, wait, f.count("LoadDirect"), reloadQuiet)
	}
	k.mu.Lock()
	k.lastApply = testNow.Add(-reloadQuiet)
	k.mu.Unlock()
	if more, wait := k.reloadOne(r); !more || wait != 0 || f.count("LoadDirect") != 1 {
		t.Fatalf("after the quiet period: more %v, wait %v, %d loads; want one load", more, wait, f.count("LoadDirect"))
	}
}

// Churn that keeps the reloader waiting does not grow its queue beyond
// the programs loaded: programs that went are dropped from it.
func TestDirectReloadQueueBounded(t *testing.T) {
	f := newFakeKernel(t)
	f.direct = true
	k := f.kernel()
	f.addLink("cali1")
	for i := range 500 {
		if err := k.ApplyEndpoint(f.endpoint("cali1", 1, fmt.Sprintf("pol-%d", i), "allow-all")); err != nil {
			t.Fatal(err)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if n, max := len(k.pols.reloadQ), 2*len(k.pols.progs)+64; n > max {
		t.Fatalf("%d programs queued for %d loaded, want at most %d", n, len(k.pols.progs), max)
	}
	if sp := k.pols.nextReload(); sp == nil || f.names[sp.pol.Hash()] != "allow-all" {
		t.Fatalf("first to reload: %+v, want the oldest program in use (egress allow-all)", sp)
	}
}
