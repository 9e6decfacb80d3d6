package tcbpf

import (
	"os"
	"testing"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// arrEntry reads ifindex's dpd_ifstate_arr entry.
func arrEntry(t *testing.T, d *Datapath, ifindex int) bpf.DpdDpdIfstate {
	t.Helper()
	var v bpf.DpdDpdIfstate
	mustNil(t, d.objs.DpdIfstateArr.Lookup(uint32(ifindex), &v))
	return v
}

// TestIfStateArrayMirrorsHash: every write of an entry below
// abi.IfStateArrEntries reaches the array the entry programs read, and a
// deleted entry reads as none there.
func TestIfStateArrayMirrorsHash(t *testing.T) {
	d := openTest(t, Options{})
	for _, step := range []struct {
		slot, flags uint32
	}{{3, 0}, {3, abi.IfReady | abi.IfWorkload}, {5, abi.IfReady}, {5, 0}} {
		mustNil(t, d.SetIfState(7, step.slot, step.flags))
		if got := arrEntry(t, d, 7); got.Slot != step.slot || got.Flags != step.flags {
			t.Fatalf("after set %d/%#x the array holds %d/%#x", step.slot, step.flags, got.Slot, got.Flags)
		}
		slot, flags, ok, err := d.IfState(7)
		mustNil(t, err)
		if !ok || slot != step.slot || flags != step.flags {
			t.Fatalf("after set %d/%#x the hash holds %d/%#x (%v)", step.slot, step.flags, slot, flags, ok)
		}
	}
	mustNil(t, d.DeleteIfState(7))
	if got := arrEntry(t, d, 7); got != (bpf.DpdDpdIfstate{}) {
		t.Fatalf("deleted entry reads %+v in the array", got)
	}
	if _, _, ok, err := d.IfState(7); err != nil || ok {
		t.Fatalf("deleted entry still in the hash (%v, %v)", ok, err)
	}
	// Beyond the array: the hash alone.
	big := abi.IfStateArrEntries + 5
	mustNil(t, d.SetIfState(big, 2, abi.IfReady))
	if _, flags, ok, err := d.IfState(big); err != nil || !ok || flags != abi.IfReady {
		t.Fatalf("ifindex %d: %v %#x %v", big, ok, flags, err)
	}
	mustNil(t, d.DeleteIfState(big))
}

// TestIfStateArraySyncedAtOpen: Open makes the array hold exactly the
// hash's entries, whatever an earlier dpd left (an entry it did not
// mirror, one it did not clear).
func TestIfStateArraySyncedAtOpen(t *testing.T) {
	pinDir := testPinDir(t)
	d := openTest(t, Options{PinDir: pinDir})
	mustNil(t, d.objs.DpdIfstate.Update(uint32(9), &bpf.DpdDpdIfstate{Slot: 4, Flags: abi.IfReady}, 0))
	mustNil(t, d.setIfStateArr(11, 6, abi.IfReady))
	mustNil(t, d.Close())

	d2 := openTest(t, Options{PinDir: pinDir})
	if got := arrEntry(t, d2, 9); got.Slot != 4 || got.Flags != abi.IfReady {
		t.Fatalf("entry only in the hash reads %+v in the array", got)
	}
	if got := arrEntry(t, d2, 11); got != (bpf.DpdDpdIfstate{}) {
		t.Fatalf("entry only in the array survived Open: %+v", got)
	}
}

// TestEntryProgramsReadBothTables: an interface below the array's end and
// one beyond it are each policed by their entry, and dropped without one.
func TestEntryProgramsReadBothTables(t *testing.T) {
	d := openTest(t, Options{})
	small, _ := vethPair(t)
	big, _ := vethPairAt(t, abi.IfStateArrEntries+1000+os.Getpid()%1000)
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0)))
	for _, ifindex := range []int{small, big} {
		pkt := udpPkt(ipA, ipB, uint16(1000+ifindex%1000), 53)
		if got := run(t, d, abi.DirFromWEP, ifindex, pkt); got != abi.TCActShot {
			t.Fatalf("ifindex %d without an entry: %d, want drop", ifindex, got)
		}
		mustNil(t, d.SetIfState(ifindex, 1, abi.IfReady))
		if got := run(t, d, abi.DirFromWEP, ifindex, pkt); got != abi.TCActOK {
			t.Fatalf("ifindex %d ready: %d, want pass", ifindex, got)
		}
		mustNil(t, d.SetIfState(ifindex, 1, 0))
		if got := run(t, d, abi.DirFromWEP, ifindex, pkt); got != abi.TCActShot {
			t.Fatalf("ifindex %d failed closed: %d, want drop", ifindex, got)
		}
	}
	// Below the array's end the programs read the array alone: made to
	// disagree, the array decides.
	pkt := udpPkt(ipA, ipB, 999, 53)
	mustNil(t, d.objs.DpdIfstate.Update(uint32(small), &bpf.DpdDpdIfstate{Slot: 1, Flags: abi.IfReady}, 0))
	mustNil(t, d.setIfStateArr(small, 0, 0))
	if got := run(t, d, abi.DirFromWEP, small, pkt); got != abi.TCActShot {
		t.Fatalf("ready in the hash only: %d, want drop", got)
	}
	mustNil(t, d.objs.DpdIfstate.Delete(uint32(small)))
	mustNil(t, d.setIfStateArr(small, 1, abi.IfReady))
	if got := run(t, d, abi.DirFromWEP, small, pkt); got != abi.TCActOK {
		t.Fatalf("ready in the array only: %d, want pass", got)
	}
}
