package tcbpf

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestConntrackScanBatches: a scan expires thousands of idle entries
// with a few syscalls per batch of its walk, not two per entry, reports
// each as ended once with its counters, and keeps every live entry.
func TestConntrackScanBatches(t *testing.T) {
	d := openTest(t, Options{Sizes: ctScanSizes(16384)})
	const idle, live = 5000, 300
	fillConntrack(t, d, idle, live)

	var err error
	ended := map[uint16]uint64{}
	sys := testutil.NewBPFSyscalls(t)
	var n int
	calls := sys.During(t, func() {
		n, err = d.ScanConntrackEnded(time.Now(), func(k *CTKey, v *CTVal) {
			if _, twice := ended[k.Sport]; twice {
				t.Errorf("entry %d ended twice", k.Sport)
			}
			ended[k.Sport] = v.PktsFwd
		})
	})
	mustNil(t, err)
	if n != idle || len(ended) != idle {
		t.Fatalf("%d expired, %d ended; want %d", n, len(ended), idle)
	}
	for i := range idle {
		if got, ok := ended[uint16(i)]; !ok || got != uint64(i) {
			t.Fatalf("entry %d ended with %d packets (reported %v), want %d", i, got, ok, i)
		}
	}
	// Two batches of up to 4,096: a lookup and a delete each (the last
	// lookup also says the walk is done); a little room beyond.
	if calls > 6 {
		t.Errorf("the scan made %d bpf syscalls for %d entries, want at most 6", calls, idle+live)
	}
	left, err := d.CountConntrack()
	mustNil(t, err)
	if left != live {
		t.Fatalf("%d entries left, want the %d live ones", left, live)
	}
}

// TestConntrackScanBatchSkipsVanished: an expired entry that is gone by
// the time its batch is deleted (evicted since the read) stops the
// kernel's batch delete; the sweep goes on after it, deletes and reports
// the rest, and does not report the vanished one.
func TestConntrackScanBatchSkipsVanished(t *testing.T) {
	d := openTest(t, Options{Sizes: ctScanSizes(1024)})
	const n = 10
	fillConntrack(t, d, n, 0)
	kt, err := ktime(time.Now())
	mustNil(t, err)
	var keys []ctKey
	var vals []ctVal
	var k ctKey
	var v ctVal
	it := d.Maps().Conntrack.Iterate()
	for it.Next(&k, &v) {
		keys, vals = append(keys, k), append(vals, v)
	}
	mustNil(t, it.Err())
	if len(keys) != n {
		t.Fatalf("%d entries, want %d", len(keys), n)
	}
	ghost := keys[0]
	ghost.Dport = 81 // never written
	keys = slices.Insert(keys, n/2, ghost)
	vals = slices.Insert(vals, n/2, vals[0])

	var ended []uint16
	s := &ctSweep{d: d, m: d.Maps().Conntrack, kt: kt, ended: func(k *CTKey, _ *CTVal) {
		if k.Dport == ghost.Dport {
			t.Errorf("the vanished entry was reported ended")
		}
		ended = append(ended, k.Sport)
	}}
	mustNil(t, s.batch(keys, vals))
	if s.expired != n || len(ended) != n {
		t.Fatalf("%d expired, %d ended; want %d", s.expired, len(ended), n)
	}
	left, err := d.CountConntrack()
	mustNil(t, err)
	if left != 0 {
		t.Fatalf("%d entries left", left)
	}
}

func ctScanSizes(conntrack int) MapSizes {
	return MapSizes{Conntrack: conntrack, IPSets: 1024, IfState: 64, RuleCounters: 256, Chain: 64}
}

// fillConntrack writes idle closed TCP flows (entry i has i forward
// packets), then live ones.
func fillConntrack(tb testing.TB, d *Datapath, idle, live int) {
	tb.Helper()
	now, err := ktime(time.Now())
	mustNil(tb, err)
	past := now - 2*uint64(CTTimeout(6, abi.CTFClosing))
	var keys []ctKey
	var vals []ctVal
	for i := range idle + live {
		k := ctKey{Proto: 6, Dir: abi.DirFromWEP, Ifindex: 7, Sport: uint16(i), Dport: 80}
		binary.BigEndian.PutUint32(k.Saddr[:4], 0x0a000000|uint32(i))
		binary.BigEndian.PutUint32(k.Daddr[:4], 0x0b000001)
		v := ctVal{Created: past, LastSeen: past, Flags: abi.CTFClosing, PktsFwd: uint64(i)}
		if i >= idle {
			v.LastSeen = now
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	_, err = d.Maps().Conntrack.BatchUpdate(keys, vals, nil)
	mustNil(tb, err)
}

// BenchmarkConntrackScanExpire: the cost of expiring an idle entry, as a
// node whose connections come and go at a steady rate pays it.
func BenchmarkConntrackScanExpire(b *testing.B) {
	const n = 100000
	d := openTest(b, Options{Sizes: ctScanSizes(2 * n)})
	var total time.Duration
	for range b.N {
		fillConntrack(b, d, n, 0)
		start := time.Now()
		got, err := d.ScanConntrackEnded(time.Now(), func(*CTKey, *CTVal) {})
		total += time.Since(start)
		if err != nil || got != n {
			b.Fatalf("%d expired, %v", got, err)
		}
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*n), "ns/entry")
}
