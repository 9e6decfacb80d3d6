package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// The direct reloader on the real kernel: with the direct epilogue call
// chosen, an endpoint's programs load with the indirect call and enforce
// at once; after EndApply the reloader swaps in direct ones, which
// dpd_jump then names, and the verdicts stay.
func TestDirectReloadKernel(t *testing.T) {
	testutil.RequirePrivileged(t)
	pin := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpd-linux-reload-%d", os.Getpid()))
	t.Cleanup(func() { _ = os.RemoveAll(pin) })
	k, err := New(Options{PinDir: pin, Log: quietLog(), Epilogue: tcbpf.EpilogueDirect})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	a, b, epA, _ := allowedPair(t, k, "10.66.1.1", "10.66.1.2")
	if n := directPrograms(k); n != 0 {
		t.Fatalf("%d programs loaded with the direct call on the endpoint's path, want 0", n)
	}
	testutil.WaitFor(t, 5*time.Second, "a pings b before the reload", func() bool { return pings(a, b.IP) })
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	awaitReloads(t, k, 2)
	checkJumpSlotsDirect(t, k)
	if !pings(a, b.IP) {
		t.Fatal("a no longer pings b after the reload")
	}

	epB2 := endpointFor(b, 2, denyAll(), allowAll())
	if err := k.ApplyEndpoint(epB2); err != nil {
		t.Fatal(err)
	}
	if pings(a, b.IP) {
		t.Fatal("ping passed after b's ingress became deny, before the reload")
	}
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	awaitReloads(t, k, 3)
	checkJumpSlotsDirect(t, k)
	if pings(a, b.IP) {
		t.Fatal("ping passed after the deny program was reloaded")
	}

	// A restart adopts the reloaded programs from their pins.
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	k2, err := New(Options{PinDir: pin, Log: quietLog(), Epilogue: tcbpf.EpilogueDirect})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k2.Close() })
	for _, ep := range []*model.Endpoint{epA, epB2} {
		if err := k2.ApplyEndpoint(ep); err != nil {
			t.Fatalf("apply %s after the restart: %v", ep.Iface, err)
		}
	}
	if o := k2.Ops(); o.ProgramLoads != 0 || o.ProgramAdopts != 3 {
		t.Fatalf("after the restart: %d programs loaded, %d adopted, want 0 and 3", o.ProgramLoads, o.ProgramAdopts)
	}
	if n := directPrograms(k2); n != 3 {
		t.Fatalf("%d adopted programs call the epilogue directly, want 3", n)
	}
}

func awaitReloads(t *testing.T, k *Kernel, n uint64) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("%d programs reloaded", n), func() bool { return k.Ops().ProgramReloads >= n })
	if got := k.Ops().ProgramReloads; got != n {
		t.Fatalf("%d programs reloaded, want %d", got, n)
	}
}

// directPrograms counts the loaded programs that call the epilogue
// directly.
func directPrograms(k *Kernel) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, sp := range k.pols.progs {
		if sp.prog.DirectEpilogue() {
			n++
		}
	}
	return n
}

// checkJumpSlotsDirect checks that every policy slot of dpd_jump names a
// program that calls the epilogue directly, as the kernel reports it:
// its maps include an epilogue array and not dpd_jump.
func checkJumpSlotsDirect(t *testing.T, k *Kernel) {
	t.Helper()
	k.mu.Lock()
	d := k.bpf
	k.mu.Unlock()
	entries, err := d.Policies()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("no policy in dpd_jump")
	}
	jumpID := mapID(t, d.Maps().Jump)
	epis := map[ebpf.MapID]bool{}
	for _, m := range d.EpilogueArrays() {
		epis[mapID(t, m)] = true
	}
	for _, e := range entries {
		p, err := ebpf.NewProgramFromID(e.Prog)
		if err != nil {
			t.Fatal(err)
		}
		info, err := p.Info()
		_ = p.Close()
		if err != nil {
			t.Fatal(err)
		}
		ids, _ := info.MapIDs()
		direct, viaJump := false, false
		for _, id := range ids {
			direct = direct || epis[id]
			viaJump = viaJump || id == jumpID
		}
		if !direct || viaJump {
			t.Errorf("slot %d dir %d runs program %d: maps %v, want an epilogue array and not dpd_jump (%d)", e.Slot, e.Dir, e.Prog, ids, jumpID)
		}
	}
}

func mapID(t *testing.T, m *ebpf.Map) ebpf.MapID {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("kernel does not report map ids")
	}
	return id
}
