package tcbpf

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// pinOldConntrack pins, under pinDir, the LRU conntrack a dpd before
// dpd_conntrack had, holding entries.
func pinOldConntrack(t *testing.T, pinDir string, entries map[ctKey]ctVal) {
	t.Helper()
	mustNil(t, os.MkdirAll(pinDir, 0o700))
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: abi.MapConntrackLRU, Type: ebpf.LRUHash,
		KeySize: abi.CTKeySize, ValueSize: abi.CTValSize, MaxEntries: 4096})
	mustNil(t, err)
	defer func() { _ = m.Close() }()
	for k, v := range entries {
		mustNil(t, m.Put(&k, &v))
	}
	mustNil(t, m.Pin(filepath.Join(pinDir, abi.MapConntrackLRU)))
}

// ctFlagsOf reads dpd_ct_cfg, checking the Datapath's mirror of it.
func ctFlagsOf(t *testing.T, d *Datapath) uint32 {
	t.Helper()
	var cfg struct{ Flags uint32 }
	mustNil(t, d.Maps().CTCfg.Lookup(uint32(0), &cfg))
	if cfg.Flags != d.ctFlags.Load() {
		t.Fatalf("dpd_ct_cfg %x, mirrored as %x", cfg.Flags, d.ctFlags.Load())
	}
	return cfg.Flags
}

// A node without an older dpd gets a stand-in dpd_ct of one entry, and
// no lookups of older state, at its first start and after a restart.
func TestConntrackOldAbsent(t *testing.T) {
	pinDir := testPinDir(t)
	for _, when := range []string{"first start", "restart"} {
		d := openTest(t, Options{PinDir: pinDir})
		if n := d.objs.DpdCt.MaxEntries(); n != ctStandIn {
			t.Fatalf("%s: stand-in %s has %d entries, want %d", when, abi.MapConntrackLRU, n, ctStandIn)
		}
		if f := ctFlagsOf(t, d); f != 0 {
			t.Fatalf("%s: flags %x on a node without an older dpd, want none", when, f)
		}
		mustNil(t, d.Close())
	}
}

// An upgraded node's flows go on: entries in the older LRU dpd_ct (of
// both key layouts) keep passing replies; while an older dpd's entry
// programs may run, new entries go where they read them; once none runs,
// a scan moves dpd_ct's entries into dpd_conntrack, normalized, and after
// two scans that find it empty dpd_ct is unpinned and its lookups end,
// with every flow still passing.
func TestConntrackOldMoves(t *testing.T) {
	pinDir := testPinDir(t)
	ifA, _ := vethPair(t)
	kt, err := ktime(time.Now())
	mustNil(t, err)
	hi, lo := ipB, ipA
	if ctAddrCmp(ptr16(hi), ptr16(lo)) < 0 {
		hi, lo = lo, hi
	}
	// The legacy layout: the approving hook's tuple as it was, from the
	// higher address; and a normalized entry of a flow from the lower one.
	legacy := ctKey{Sport: 40000, Dport: 80, Proto: 6, Dir: abi.DirFromWEP, Ifindex: uint32(ifA)}
	h4, l4 := hi.As4(), lo.As4()
	copy(legacy.Saddr[:], h4[:])
	copy(legacy.Daddr[:], l4[:])
	if !ctLegacy(&legacy) {
		t.Fatalf("%+v does not read as legacy", legacy)
	}
	norm := ctKey{Sport: 40001, Dport: 80, Proto: 6, Dir: abi.DirFromWEP, Ifindex: uint32(ifA)}
	copy(norm.Saddr[:], l4[:])
	copy(norm.Daddr[:], h4[:])
	pinOldConntrack(t, pinDir, map[ctKey]ctVal{
		legacy: {Created: kt, LastSeen: kt}, norm: {Created: kt, LastSeen: kt},
	})

	d := openTest(t, Options{PinDir: pinDir})
	policeIface(t, d, ifA, 1, abi.VerdictAllow, abi.VerdictDeny)
	if f := ctFlagsOf(t, d); f != abi.CTCfgLRU|abi.CTCfgLegacy {
		t.Fatalf("flags %x on a node with an older conntrack, want its lookups", f)
	}
	replies := map[string][]byte{
		"legacy entry":     tcpPkt(lo, hi, 80, 40000, tcpACK),
		"normalized entry": tcpPkt(hi, lo, 80, 40001, tcpACK),
	}
	pass := func(when string) {
		t.Helper()
		for what, reply := range replies {
			if got := run(t, d, abi.DirToWEP, ifA, reply); got != abi.TCActOK {
				t.Fatalf("%s: reply of the %s: %d, want pass", when, what, got)
			}
		}
	}
	pass("after the upgrade")
	scan := func() uint32 {
		t.Helper()
		if _, err := d.ScanConntrack(time.Now()); err != nil {
			t.Fatal(err)
		}
		return ctFlagsOf(t, d)
	}
	oldHas := func(k ctKey) bool {
		t.Helper()
		var v ctVal
		err := d.objs.DpdCt.Lookup(&k, &v)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatal(err)
		}
		return err == nil
	}

	// New flows go to dpd_conntrack unless older entry programs read only
	// dpd_ct: then there, the oldest way.
	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(lo, hi, 40002, 80, tcpSYN)); got != abi.TCActOK {
		t.Fatalf("allowed SYN: %d", got)
	}
	k, _ := CTFlowKey(ap4(lo, 40002), ap4(hi, 80), 6, abi.DirFromWEP, uint32(ifA))
	var v ctVal
	if err := d.Maps().Conntrack.Lookup(&k, &v); err != nil || oldHas(k) {
		t.Fatalf("new entry not in %s alone: %v", abi.MapConntrack, err)
	}
	replies["new entry"] = tcpPkt(hi, lo, 80, 40002, tcpSYN|tcpACK)
	mustNil(t, d.setCTCfg(abi.CTCfgLRU|abi.CTCfgWriteLRU|abi.CTCfgLegacy|abi.CTCfgWriteLegacy))
	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(hi, lo, 40003, 80, tcpSYN)); got != abi.TCActOK {
		t.Fatalf("allowed SYN: %d", got)
	}
	written := legacy
	written.Sport = 40003
	if !oldHas(written) {
		t.Fatalf("entry written while older programs may run is not in %s under the legacy key", abi.MapConntrackLRU)
	}
	replies["entry written the old way"] = tcpPkt(lo, hi, 80, 40003, tcpSYN|tcpACK)
	pass("writing the old way")

	// An older dpd's entry program still on an interface: nothing moves.
	prev, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "dpd_from_wep", Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, abi.TCActOK), asm.Return()},
	})
	mustNil(t, err)
	defer func() { _ = prev.Close() }()
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifA, Program: prev, Attach: ebpf.AttachTCXIngress})
	mustNil(t, err)
	defer func() { _ = l.Close() }()
	all := uint32(abi.CTCfgLRU | abi.CTCfgWriteLRU | abi.CTCfgLegacy | abi.CTCfgWriteLegacy)
	if f := scan(); f != all || !oldHas(legacy) || !oldHas(norm) || !oldHas(written) {
		t.Fatalf("flags %x with an older entry program attached, want %x and nothing moved", f, all)
	}
	mustNil(t, l.Close())
	// Gone: writes go to dpd_conntrack; the next scan moves the rest.
	if f := scan(); f != abi.CTCfgLRU|abi.CTCfgLegacy || !oldHas(legacy) {
		t.Fatalf("flags %x once no older program runs, want the lookups only, nothing moved yet", f)
	}
	if f := scan(); f != abi.CTCfgLRU|abi.CTCfgLegacy {
		t.Fatalf("flags %x after the scan that moved, want the lookups still", f)
	}
	if n, err := mapEntries(d.objs.DpdCt); err != nil || n != 0 {
		t.Fatalf("%s holds %d entries after a moving scan (%v), want none", abi.MapConntrackLRU, n, err)
	}
	moved, flags := CTFlowKey(ap4(hi, 40000), ap4(lo, 80), 6, abi.DirFromWEP, uint32(ifA))
	if err := d.Maps().Conntrack.Lookup(&moved, &v); err != nil || v.Flags&abi.CTFOrigHi != flags {
		t.Fatalf("legacy entry not moved normalized: %+v %v", v, err)
	}
	pass("after the move")
	if f := scan(); f != 0 {
		t.Fatalf("flags %x after two scans that found %s empty, want none", f, abi.MapConntrackLRU)
	}
	if _, err := os.Stat(filepath.Join(pinDir, abi.MapConntrackLRU)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s still pinned: %v", abi.MapConntrackLRU, err)
	}
	pass("without the older conntrack")
	// The next start finds no older conntrack: a stand-in, no lookups,
	// the moved flows in dpd_conntrack.
	mustNil(t, d.Close())
	d = openTest(t, Options{PinDir: pinDir})
	if f := ctFlagsOf(t, d); f != 0 || d.objs.DpdCt.MaxEntries() != ctStandIn {
		t.Fatalf("restart after the move: flags %x, %s of %d entries; want none and the stand-in",
			f, abi.MapConntrackLRU, d.objs.DpdCt.MaxEntries())
	}
	pass("after the restart")
}

// A full conntrack refuses new flows, counted, and keeps every live one.
func TestConntrackFullRefusesNew(t *testing.T) {
	d := openTest(t, Options{Sizes: MapSizes{Conntrack: 8, IPSets: 1024, IfState: 64, RuleCounters: 256, Chain: 64}})
	ifA, _ := vethPair(t)
	policeIface(t, d, ifA, 1, abi.VerdictAllow, abi.VerdictDeny)
	for i := range 8 {
		if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, uint16(40000+i), 80, tcpSYN)); got != abi.TCActOK {
			t.Fatalf("SYN %d with room: %d, want pass", i, got)
		}
	}
	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40008, 80, tcpSYN)); got != abi.TCActShot {
		t.Fatalf("SYN with conntrack full: %d, want drop", got)
	}
	if p, _, err := d.ReadDrops(DropCTFull); err != nil || p != 1 {
		t.Fatalf("%s drops %d (%v), want 1", DropCTFull, p, err)
	}
	for i := range 8 {
		if got := run(t, d, abi.DirToWEP, ifA, tcpPkt(ipB, ipA, 80, uint16(40000+i), tcpSYN|tcpACK)); got != abi.TCActOK {
			t.Fatalf("reply of flow %d with conntrack full: %d, want pass (nothing evicted)", i, got)
		}
	}
}

func ap4(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// A move keeps the newer entry already in dpd_conntrack, and undoes its
// copy when the entry left dpd_ct meanwhile (a service flush).
func TestConntrackMoveEntry(t *testing.T) {
	pinDir := testPinDir(t)
	pinOldConntrack(t, pinDir, nil)
	d := openTest(t, Options{PinDir: pinDir})
	k, _ := CTFlowKey(ap4(ipA, 40000), ap4(ipB, 80), 6, abi.DirFromWEP, 9)
	older, newer := ctVal{Created: 1, LastSeen: 1}, ctVal{Created: 2, LastSeen: 2}
	mustNil(t, d.objs.DpdCt.Put(&k, &older))
	mustNil(t, d.objs.DpdConntrack.Put(&k, &newer))
	nk, nv, stays, err := d.moveCTEntry(k, older)
	if err != nil || stays || nk == nil || *nk != k || nv.Created != newer.Created {
		t.Fatalf("move onto a newer entry: %+v %+v stays=%v %v; want the newer one", nk, nv, stays, err)
	}
	if n, err := mapEntries(d.objs.DpdCt); err != nil || n != 0 {
		t.Fatalf("%s holds %d entries after the move (%v)", abi.MapConntrackLRU, n, err)
	}
	// Gone from dpd_ct before the move deletes it: the copy goes too.
	gone, _ := CTFlowKey(ap4(ipA, 40001), ap4(ipB, 80), 6, abi.DirFromWEP, 9)
	nk, _, stays, err = d.moveCTEntry(gone, older)
	if err != nil || stays || nk != nil {
		t.Fatalf("move of a deleted entry: %+v stays=%v %v; want nothing", nk, stays, err)
	}
	var v ctVal
	if err := d.objs.DpdConntrack.Lookup(&gone, &v); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("copy of a deleted entry left in %s: %v", abi.MapConntrack, err)
	}
}

// A node an older dpd ran keeps its conntrack size: PinnedSizes reads it
// from dpd_ct while there is no dpd_conntrack.
func TestPinnedSizesOlderConntrack(t *testing.T) {
	testutil.RequirePrivileged(t)
	pinDir := testPinDir(t)
	pinOldConntrack(t, pinDir, nil) // 4096 entries
	s, ok, err := PinnedSizes(pinDir)
	if err != nil || !ok || s.Conntrack != 4096 {
		t.Fatalf("pinned sizes %+v ok=%v %v; want conntrack 4096 from %s", s, ok, err, abi.MapConntrackLRU)
	}
}

// mapEntries counts the entries of one conntrack map.
func mapEntries(m *ebpf.Map) (int, error) {
	n := 0
	err := ctIterate(m, func(*ctKey, *ctVal) { n++ })
	return n, err
}
