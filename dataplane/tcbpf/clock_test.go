package tcbpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

func TestTickOf(t *testing.T) {
	const s = 1_000_000_000
	for _, c := range []struct {
		name             string
		j0, ns0, j1, ns1 uint64
		want             uint64
		ok               bool
	}{
		{"HZ=250 over 2 s", 1000, 5 * s, 1500, 7 * s, 4_000_000, true},
		{"HZ=1000, a tick late", 1000, 5 * s, 2001, 6 * s, 1_000_000, true},
		{"HZ=1024 is no Kconfig.hz choice", 1000, 5 * s, 2024, 6 * s, 0, false},
		{"HZ=300", 0 + 1, 5 * s, 301, 6 * s, 3_333_333, true},
		{"HZ=100", 10, 5 * s, 110, 6 * s, 10_000_000, true},
		{"too short a span", 1000, 5 * s, 1100, 5*s + 400_000_000, 0, false},
		{"jiffies did not move", 1000, 5 * s, 1000, 7 * s, 0, false},
		{"no kernel HZ fits", 1000, 5 * s, 1400, 6 * s, 0, false},
		{"clock went back", 1000, 7 * s, 1500, 5 * s, 0, false},
	} {
		got, ok := tickOf(c.j0, c.ns0, c.j1, c.ns1)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: tickOf = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// TestClockFollowsCoarse: once calibrated, the programs stamp a new flow
// with what the scanner's clock reads, to within a few ticks.
func TestClockFollowsCoarse(t *testing.T) {
	d := openTest(t, Options{})
	c, err := d.Clock()
	mustNil(t, err)
	if c.SampleJiffies == 0 {
		t.Fatal("Open took no clock sample")
	}
	c = waitClockCalibrated(t, d)
	t.Logf("tick %d ns", c.TickNs)

	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 0, abi.IfReady))
	mustNil(t, d.InstallPolicy(0, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0)))
	before, err := ktime(time.Now())
	mustNil(t, err)
	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40000, 80, tcpSYN)); got != abi.TCActOK {
		t.Fatalf("new flow: %d", got)
	}
	after, err := ktime(time.Now())
	mustNil(t, err)
	key, _ := CTFlowKey(netip.AddrPortFrom(ipA, 40000), netip.AddrPortFrom(ipB, 80), 6, abi.DirFromWEP, uint32(ifA))
	var v CTVal
	mustNil(t, d.objs.DpdConntrack.Lookup(&key, &v))
	slack := 3 * c.TickNs
	if v.Created+slack < before || v.Created > after+slack {
		t.Fatalf("entry stamped %d, the coarse clock read %d..%d (tick %d)", v.Created, before, after, c.TickNs)
	}

	// The stamp is the calibrated clock's, not the helper's: an offset
	// moved by an hour moves it by an hour.
	c, err = d.Clock()
	mustNil(t, err)
	c.OffsetNs += uint64(time.Hour)
	mustNil(t, d.objs.DpdClock.Update(uint32(0), &c, 0))
	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40001, 80, tcpSYN)); got != abi.TCActOK {
		t.Fatalf("second flow: %d", got)
	}
	key, _ = CTFlowKey(netip.AddrPortFrom(ipA, 40001), netip.AddrPortFrom(ipB, 80), 6, abi.DirFromWEP, uint32(ifA))
	mustNil(t, d.objs.DpdConntrack.Lookup(&key, &v))
	if skew := int64(v.Created - after); skew < int64(time.Hour)-int64(slack) || skew > int64(time.Hour)+int64(time.Second) {
		t.Fatalf("with the offset an hour on, the entry is stamped %v after the coarse clock", time.Duration(skew))
	}
}

// waitClockCalibrated syncs d's clock until it has learnt the tick, as
// the scanner does in production: what the entry programs run on once dpd
// has run a second.
func waitClockCalibrated(tb testing.TB, d *Datapath) ClockState {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mustNil(tb, d.SyncClock())
		c, err := d.Clock()
		mustNil(tb, err)
		if c.TickNs != 0 {
			return c
		}
		if time.Now().After(deadline) {
			tb.Fatal("the clock did not calibrate within 10 s")
		}
		time.Sleep(100 * time.Millisecond) // the calibration waits for time to pass
	}
}
