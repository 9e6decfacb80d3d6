package tcbpf

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

func mapID(t *testing.T, m *ebpf.Map) ebpf.MapID {
	t.Helper()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

// TestRestartKeepsState: a second Open on the same pins uses the same map
// instances, so installed policies, ifstate and conntrack survive; a
// changed size replaces just that map.
func TestRestartKeepsState(t *testing.T) {
	pinDir := testPinDir(t)
	sizes := MapSizes{Conntrack: 1024, IPSets: 1024, IfState: 64, RuleCounters: 256, Chain: 64}
	d := openTest(t, Options{PinDir: pinDir, Sizes: sizes})
	for _, name := range []string{abi.MapState, abi.MapJump, abi.MapIfState, abi.MapIPSets, abi.MapIPSetIDs,
		abi.MapConntrack, abi.MapRuleCtrs, abi.MapChain, abi.MapTrace} {
		if _, err := os.Stat(filepath.Join(pinDir, name)); err != nil {
			t.Fatalf("map %s not pinned: %v", name, err)
		}
	}
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 3, abi.IfReady))
	mustNil(t, d.InstallPolicy(3, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0)))
	if got := run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 1, 2)); got != abi.TCActOK {
		t.Fatalf("before restart: %d", got)
	}
	jumpID, ctID := mapID(t, d.Maps().Jump), mapID(t, d.Maps().Conntrack)
	mustNil(t, d.Close())

	d2 := openTest(t, Options{PinDir: pinDir, Sizes: sizes})
	if mapID(t, d2.Maps().Jump) != jumpID || mapID(t, d2.Maps().Conntrack) != ctID {
		t.Fatal("restart created new maps instead of reusing the pins")
	}
	if slot, _, ok, err := d2.IfState(ifA); err != nil || !ok || slot != 3 {
		t.Fatalf("ifstate after restart: %d %v %v", slot, ok, err)
	}
	if n, _ := d2.CountConntrack(); n != 1 {
		t.Fatalf("%d conntrack entries after restart, want 1", n)
	}
	// The policy installed before the restart still decides new flows.
	if got := run(t, d2, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 3, 4)); got != abi.TCActOK {
		t.Fatalf("after restart: %d", got)
	}
	mustNil(t, d2.Close())

	bigger := sizes
	bigger.Conntrack = 2048
	d3 := openTest(t, Options{PinDir: pinDir, Sizes: bigger})
	if mapID(t, d3.Maps().Conntrack) == ctID || d3.Maps().Conntrack.MaxEntries() != 2048 {
		t.Fatal("resized conntrack map was not replaced")
	}
	if mapID(t, d3.Maps().Jump) != jumpID {
		t.Fatal("an unchanged map was replaced")
	}
}

func TestPolicySlotBounds(t *testing.T) {
	d := openTest(t, Options{})
	p := verdictProg(t, d, abi.VerdictAllow, 0)
	slots := d.Sizes().Slots()
	if err := d.InstallPolicy(slots, abi.DirFromWEP, p); err == nil {
		t.Fatal("slot beyond the jump map accepted")
	}
	if err := d.InstallPolicy(0, 2, p); err == nil {
		t.Fatal("bad direction accepted")
	}
	if err := d.SetIfState(1, slots, abi.IfReady); err == nil {
		t.Fatal("ifstate with a slot beyond the jump map accepted")
	}
	mustNil(t, d.InstallPolicy(slots-1, abi.DirToWEP, p))
	mustNil(t, d.ClearPolicy(slots-1, abi.DirToWEP))
	mustNil(t, d.ClearPolicy(slots-1, abi.DirToWEP))
}

func TestConntrackScannerStops(t *testing.T) {
	d := openTest(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		d.RunConntrackScanner(ctx, time.Millisecond)
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("scanner did not stop when its context ended")
	}
}
