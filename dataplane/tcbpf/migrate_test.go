package tcbpf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

func migrationOf(d *Datapath, name string) (MigrationReport, bool) {
	for _, r := range d.Migrations() {
		if r.Map == name {
			return r, true
		}
	}
	return MigrationReport{}, false
}

// TestMigrateResizedMaps: new sizes for conntrack, IP sets and ifstate (and
// with it dpd_jump) migrate the pinned maps: every entry is carried over,
// the installed policy still decides, and nothing is emptied.
func TestMigrateResizedMaps(t *testing.T) {
	pinDir := testPinDir(t)
	sizes := MapSizes{Conntrack: 1024, IPSets: 1024, IfState: 64, RuleCounters: 256, Chain: 64}
	d := openTest(t, Options{PinDir: pinDir, Sizes: sizes})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 3, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(3, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0)))
	if got := run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 1, 2)); got != abi.TCActOK {
		t.Fatalf("before migration: %d", got)
	}
	set := members("10.1.0.0/16", "10.2.0.1/32")
	mustNil(t, d.ReplaceIPSet("s1", model.IPSetNet, set))
	setID, _ := d.SetID("s1")
	ctID := mapID(t, d.Maps().Conntrack)
	mustNil(t, d.Close())

	bigger := MapSizes{Conntrack: 4096, IPSets: 2048, IfState: 128, RuleCounters: 256, Chain: 64}
	d2 := openTest(t, Options{PinDir: pinDir, Sizes: bigger})
	m := d2.Maps()
	if mapID(t, m.Conntrack) == ctID {
		t.Fatal("resized conntrack kept the old map")
	}
	for name, want := range map[string]uint32{
		abi.MapConntrack: 4096, abi.MapIPSets: 2048, abi.MapIfState: 128, abi.MapJump: uint32(abi.JumpPolBase + 2*128),
	} {
		r, ok := migrationOf(d2, name)
		if !ok || !r.Replaced || r.Copied == 0 || r.Dropped != 0 {
			t.Errorf("%s: migration %+v (found %v), want replaced with entries copied", name, r, ok)
		}
		pinned, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), nil)
		if err != nil {
			t.Fatal(err)
		}
		if pinned.MaxEntries() != want {
			t.Errorf("%s pinned with %d entries, want %d", name, pinned.MaxEntries(), want)
		}
		_ = pinned.Close()
	}
	if n, _ := d2.CountConntrack(); n != 1 {
		t.Errorf("%d conntrack entries after migration, want 1", n)
	}
	if slot, flags, ok, err := d2.IfState(ifA); err != nil || !ok || slot != 3 || flags != abi.IfReady|abi.IfWorkload {
		t.Errorf("ifstate after migration: slot %d flags %#x ok %v err %v", slot, flags, ok, err)
	}
	if id, ok := d2.SetID("s1"); !ok || id != setID {
		t.Errorf("set s1 id after migration: %d %v, want %d", id, ok, setID)
	}
	// The set's members came along: replacing with the same members writes
	// nothing new, and the LPM trie answers for them.
	var v uint32
	k, err := memberKey(setID, set[1])
	mustNil(t, err)
	if err := m.IPSets.Lookup(&k, &v); err != nil {
		t.Errorf("member %v lost in migration: %v", set[1].Prefix, err)
	}
	// The policy installed before still decides new flows, through the new
	// jump map the new entry program uses.
	if got := run(t, d2, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 5, 6)); got != abi.TCActOK {
		t.Errorf("after migration: %d", got)
	}
	// That policy tail-calls the epilogue through the old dpd_jump, which is
	// kept pinned aside while the policy is installed, and released after.
	if kept, err := d2.ReleaseRetired(nil); err != nil || kept != 1 {
		t.Fatalf("release retired with the old policy installed: kept %d, %v; want 1 kept", kept, err)
	}
	mustNil(t, d2.ClearPolicy(3, abi.DirFromWEP))
	if kept, err := d2.ReleaseRetired(nil); err != nil || kept != 0 {
		t.Fatalf("release retired after the policy went: kept %d, %v; want 0", kept, err)
	}
	if _, err := os.Stat(filepath.Join(pinDir, retiredDir)); !os.IsNotExist(err) {
		if ents, _ := os.ReadDir(filepath.Join(pinDir, retiredDir)); len(ents) > 0 {
			t.Errorf("retired maps left: %v", ents)
		}
	}
}

// TestMigrateLayouts: a grown value is zero-extended; a changed key cannot
// be converted and the map starts empty (the old behaviour, now the
// exception).
func TestMigrateLayouts(t *testing.T) {
	testutil.RequirePrivileged(t)
	pinDir := testPinDir(t)
	sizes := MapSizes{Conntrack: 1024, IPSets: 1024, IfState: 64, RuleCounters: 256, Chain: 64}
	d := openTest(t, Options{PinDir: pinDir, Sizes: sizes})
	mustNil(t, d.Close())

	// An older dpd_ifstate whose value was just the slot.
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: abi.MapIfState, Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 64})
	mustNil(t, err)
	mustNil(t, old.Update(uint32(42), uint32(7), ebpf.UpdateAny))
	// An older dpd_ipset_ids with another key layout.
	oldIDs, err := ebpf.NewMap(&ebpf.MapSpec{Name: abi.MapIPSetIDs, Type: ebpf.Hash, KeySize: 8, ValueSize: 4, MaxEntries: 16})
	mustNil(t, err)
	mustNil(t, oldIDs.Update(uint64(1), uint32(1), ebpf.UpdateAny))
	for name, m := range map[string]*ebpf.Map{abi.MapIfState: old, abi.MapIPSetIDs: oldIDs} {
		path := filepath.Join(pinDir, name)
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		mustNil(t, m.Pin(path))
		_ = m.Close()
	}

	d2 := openTest(t, Options{PinDir: pinDir, Sizes: sizes})
	slot, flags, ok, err := d2.IfState(42)
	if err != nil || !ok || slot != 7 || flags != 0 {
		t.Errorf("grown ifstate value: slot %d flags %#x ok %v err %v; want slot 7, flags 0", slot, flags, ok, err)
	}
	if r, ok := migrationOf(d2, abi.MapIfState); !ok || !r.Replaced || r.Copied != 1 {
		t.Errorf("ifstate migration %+v", r)
	}
	if r, ok := migrationOf(d2, abi.MapIPSetIDs); !ok || r.Replaced {
		t.Errorf("ipset ids with a new key layout: %+v, want replaced empty", r)
	}
	if _, ok := migrationOf(d2, abi.MapConntrack); ok {
		t.Error("an unchanged map was migrated")
	}
}

// TestPinnedSizes: a restart opens maps with the sizes they were pinned
// with, whatever the defaults.
func TestPinnedSizes(t *testing.T) {
	pinDir := testPinDir(t)
	if _, ok, err := PinnedSizes(pinDir); ok || err != nil {
		t.Fatalf("sizes reported for an empty pin dir (%v)", err)
	}
	sizes := MapSizes{Conntrack: 1024, IPSets: 1024, IfState: 64, RuleCounters: 256, Chain: 64, Fragments: 128}
	d := openTest(t, Options{PinDir: pinDir, Sizes: sizes})
	want := d.Sizes()
	mustNil(t, d.Close())
	got, ok, err := PinnedSizes(pinDir)
	if !ok || err != nil || got != want {
		t.Fatalf("pinned sizes %+v (%v, %v), want %+v", got, ok, err, want)
	}
}
