package linux

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// fakeCT is a conntrack table for endScan: entries in expire are deleted
// and reported ended by the next scan, the rest are live; failAfter > 0
// makes the next scan fail after that many live entries.
type fakeCT struct {
	ents      map[tcbpf.CTKey]tcbpf.CTVal
	expire    map[tcbpf.CTKey]bool
	failAfter int
}

func (f *fakeCT) ScanConntrackFlows(_ time.Time, ended, live func(*tcbpf.CTKey, *tcbpf.CTVal)) (int, error) {
	n, seen := 0, 0
	for k, v := range f.ents { // Go's random order: the tracker must not depend on it
		if f.expire[k] {
			delete(f.ents, k)
			n++
			if ended != nil && k.Dir != abi.DirNAT {
				ended(&k, &v)
			}
			continue
		}
		if f.failAfter > 0 && seen == f.failAfter {
			f.failAfter = 0
			return n, errors.New("walk interrupted")
		}
		seen++
		if live != nil {
			live(&k, &v)
		}
	}
	clear(f.expire)
	return n, nil
}

func ctFlow(sport uint16) tcbpf.CTKey {
	k := tcbpf.CTKey{Sport: sport, Dport: 53, Proto: unix.IPPROTO_UDP, Dir: abi.DirFromWEP, Ifindex: 7}
	copy(k.Saddr[:], []byte{10, 65, 0, 2})
	copy(k.Daddr[:], []byte{10, 65, 0, 3})
	return k
}

// endsOf summarises a scan's ends as "sport:reason:packets" in order.
func endsOf(sc *endScan) []string {
	var out []string
	for _, ev := range sc.ends {
		out = append(out, fmt.Sprintf("%d:%s:%d", ev.Src.Port(), ev.EndReason, ev.Forward.Packets))
	}
	sort.Strings(out)
	return out
}

// TestEndScanReportsEvictions: a flow entry gone between two scans
// without the scanner expiring it is reported ended as evicted, with the
// counters of the scan before; one the scanner expires is reported
// expired only; a key that holds a new flow (another creation time)
// reports the old one evicted; NAT entries are never flows.
func TestEndScanReportsEvictions(t *testing.T) {
	nat := ctFlow(9)
	nat.Dir = abi.DirNAT
	f := &fakeCT{ents: map[tcbpf.CTKey]tcbpf.CTVal{
		ctFlow(1): {Created: 1, PktsFwd: 1}, ctFlow(2): {Created: 2, PktsFwd: 2}, ctFlow(3): {Created: 3, PktsFwd: 3}, nat: {Created: 9},
	}, expire: map[tcbpf.CTKey]bool{}}
	sc := newEndScan(true, tcbpf.NewMonoClock())
	scan := func(want ...string) {
		t.Helper()
		if _, err := sc.scan(f, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := endsOf(sc); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("ends %v, want %v", got, want)
		}
	}
	scan() // the first scan only learns the flows

	delete(f.ents, ctFlow(1))                                // evicted
	f.ents[ctFlow(2)] = tcbpf.CTVal{Created: 2, PktsFwd: 20} // more packets since
	f.expire[ctFlow(3)] = true                               // idles out
	delete(f.ents, nat)                                      // NAT entries are not followed
	f.ents[ctFlow(4)] = tcbpf.CTVal{Created: 4, PktsFwd: 4}
	scan("1:evicted:1", "3:expired:3")
	if sc.evicted != 1 {
		t.Errorf("evicted %d, want 1", sc.evicted)
	}

	f.ents[ctFlow(2)] = tcbpf.CTVal{Created: 22, PktsFwd: 1} // evicted, and a new flow took the key
	scan("2:evicted:20")

	// A scan that fails midway reports nothing and forgets nothing: the
	// next one still knows every flow.
	f.failAfter = 1
	if _, err := sc.scan(f, time.Now()); err == nil {
		t.Fatal("the failing scan succeeded")
	}
	if len(sc.ends) != 0 {
		t.Fatalf("a failed scan reported %v", endsOf(sc))
	}
	delete(f.ents, ctFlow(4))
	scan("4:evicted:4")
	scan()
}

// TestFlowTrackerCap: the tracker follows at most its cap of flows,
// counts the rest, and never drops a flow it follows for a newcomer,
// whatever order the walk sees them in.
func TestFlowTrackerCap(t *testing.T) {
	for round := range 20 {
		f := &fakeCT{ents: map[tcbpf.CTKey]tcbpf.CTVal{}, expire: map[tcbpf.CTKey]bool{}}
		for i := range 3 {
			f.ents[ctFlow(uint16(i+1))] = tcbpf.CTVal{Created: uint64(i + 1)}
		}
		sc := newEndScan(true, tcbpf.NewMonoClock())
		sc.tr.max = 3
		if _, err := sc.scan(f, time.Now()); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			f.ents[ctFlow(uint16(100+i))] = tcbpf.CTVal{Created: uint64(100 + i)}
		}
		if _, err := sc.scan(f, time.Now()); err != nil {
			t.Fatal(err)
		}
		if len(sc.ends) != 0 || sc.tr.untracked != 5 || sc.tr.tracked() != 3 {
			t.Fatalf("round %d: ends %v, untracked %d, tracked %d; want none, 5, 3", round, endsOf(sc), sc.tr.untracked, sc.tr.tracked())
		}
		for i := range 3 {
			delete(f.ents, ctFlow(uint16(i+1)))
		}
		if _, err := sc.scan(f, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := endsOf(sc); fmt.Sprint(got) != "[1:evicted:0 2:evicted:0 3:evicted:0]" {
			t.Fatalf("round %d: ends %v, want the 3 followed flows evicted", round, got)
		}
	}
}

// TestEvictedFlowEndKernel: during an upgrade, while an older dpd's entry
// program still runs, its real (small) LRU conntrack dpd_ct is where
// entries are written, and a flow entry that table evicts when full is
// reported by the next scan as an evicted end with the counters the scan
// before read.
func TestEvictedFlowEndKernel(t *testing.T) {
	testutil.RequirePrivileged(t)
	sizes := tcbpf.DefaultMapSizes()
	sizes.Conntrack = 256
	pin := newPinDir(t)
	// The node as an older dpd left it: an interface with state running
	// that dpd's entry program, and its LRU conntrack.
	w := newWorkload(t, "10.65.0.2")
	ifindex := ifindexOf(t, w.HostIface)
	d, err := tcbpf.Open(tcbpf.Options{PinDir: pin, Sizes: sizes, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetIfState(ifindex, 1, abi.IfReady); err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
	prev, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "dpd_from_wep", Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, abi.TCActOK), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = prev.Close() }()
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prev, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	if err := os.Remove(filepath.Join(pin, abi.MapConntrackLRU)); err != nil { // the stand-in
		t.Fatal(err)
	}
	older, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: abi.CTKeySize, ValueSize: abi.CTValSize,
		MaxEntries: uint32(sizes.Conntrack)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = older.Close() }()
	if err := older.Pin(filepath.Join(pin, abi.MapConntrackLRU)); err != nil {
		t.Fatal(err)
	}

	d, err = tcbpf.Open(tcbpf.Options{PinDir: pin, Sizes: sizes, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	ct := d.Maps().ConntrackOld
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		t.Fatal(err)
	}
	fresh := func(pkts uint64) tcbpf.CTVal {
		return tcbpf.CTVal{Created: uint64(ts.Nano()), LastSeen: uint64(ts.Nano()) + uint64(time.Hour), RuleId: 0xa1,
			PktsFwd: pkts, BytesFwd: 100 * pkts, PktsRev: 1, BytesRev: 60}
	}
	// Every insert from one CPU: an LRU entry waits in the pending list of
	// the CPU that inserted it until that CPU allocates again, so a victim
	// inserted on a CPU the fill below never runs on is never evicted.
	oneCPU(t)
	victim := ctFlow(1)
	v := fresh(3)
	if err := ct.Update(&victim, &v, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	sc := newEndScan(true, tcbpf.NewMonoClock())
	if _, err := sc.scan(d, time.Now()); err != nil || len(sc.ends) != 0 {
		t.Fatalf("first scan: ends %v, err %v", endsOf(sc), err)
	}
	// Fill the table with other flows until the LRU evicts the victim.
	gone := false
	for i := 0; i < 64*sizes.Conntrack && !gone; i++ {
		k, nv := ctFlow(uint16(1000+i)), fresh(1)
		if err := ct.Update(&k, &nv, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		if i%64 == 63 {
			gone = errors.Is(ct.Lookup(&victim, &nv), ebpf.ErrKeyNotExist)
		}
	}
	if !gone {
		t.Fatal("the full LRU never evicted the victim entry")
	}
	if _, err := sc.scan(d, time.Now()); err != nil {
		t.Fatal(err)
	}
	var end *model.FlowEvent
	for i := range sc.ends {
		if sc.ends[i].Src == netip.MustParseAddrPort("10.65.0.2:1") {
			end = &sc.ends[i]
		}
	}
	if end == nil {
		t.Fatalf("no end of the evicted flow among %d ends", len(sc.ends))
	}
	if end.EndReason != model.FlowEndEvicted || end.Forward != (model.FlowCounts{Packets: 3, Bytes: 300}) ||
		end.Reply != (model.FlowCounts{Packets: 1, Bytes: 60}) || end.RuleID != 0xa1 || !end.Allowed {
		t.Fatalf("evicted end %+v: want evicted, 3 packets 300 B forward, 1 packet 60 B back, rule a1", end)
	}
	for _, ev := range sc.ends {
		if ev.EndReason != model.FlowEndEvicted {
			t.Errorf("end %+v: only evictions happened", ev)
		}
	}
}

// oneCPU keeps the test's goroutine on its OS thread and that thread on
// the first CPU it may run on, until the test ends.
func oneCPU(t *testing.T) {
	t.Helper()
	runtime.LockOSThread()
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	var one unix.CPUSet
	for cpu := 0; cpu < 1024; cpu++ {
		if was.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.SchedSetaffinity(0, &was)
		runtime.UnlockOSThread()
	})
}
