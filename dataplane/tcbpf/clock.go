package tcbpf

import (
	"fmt"
	"math"

	"github.com/dpd-dev/dpd/bpf"
)

// The programs' clock (bpf/dpd_clock.h) is jiffies * tick + offset,
// calibrated against CLOCK_MONOTONIC_COARSE, the clock the scanner reads
// (ktime). The tick is learnt from two samples at least minClockSpan
// apart, as the TICK_NSEC of the one Kconfig.hz value that fits (tickOf);
// until it is published the programs read the coarse clock through its
// helper. The map is pinned, so a restarted dpd keeps the tick of the boot.

// minClockSpan is the shortest span between samples the tick is learnt
// from: over it, the kernelHZ ticks are told apart even at HZ=100.
const minClockSpan = 1_000_000_000 // ns

// ClockState is struct dpd_clock.
type ClockState = bpf.DpdDpdClock

// SyncClock samples jiffies and the coarse clock in the kernel and moves
// the programs' offset to this sample. The first sync a second or more
// after an earlier one learns the tick and sets its offset; the next one
// publishes the tick, so that no CPU sees it before that offset. Call it
// every few seconds: the programs' clock drifts from the coarse one by the
// clock's frequency correction between syncs (at most 500 ppm).
func (d *Datapath) SyncClock() error {
	d.clockMu.Lock()
	defer d.clockMu.Unlock()
	prev, err := d.Clock()
	if err != nil {
		return fmt.Errorf("sync clock: %w", err)
	}
	if prev.TickNs != 0 {
		return d.runClockSync(prev.TickNs, true)
	}
	if d.clockPending != 0 {
		if err := d.runClockSync(d.clockPending, true); err != nil {
			return err
		}
		d.log.Info("programs' clock calibrated", "tick_ns", d.clockPending, "hz", math.Round(1e9/float64(d.clockPending)))
		d.clockPending = 0
		return nil
	}
	if err := d.runClockSync(0, false); err != nil {
		return err
	}
	if d.clockFirst.SampleJiffies == 0 {
		// A sample an earlier dpd left is as good a start as any.
		d.clockFirst = prev
	}
	cur, err := d.Clock()
	if err != nil {
		return fmt.Errorf("sync clock: %w", err)
	}
	if d.clockFirst.SampleJiffies == 0 {
		d.clockFirst = cur
		return nil
	}
	tick, ok := tickOf(d.clockFirst.SampleJiffies, d.clockFirst.SampleNs, cur.SampleJiffies, cur.SampleNs)
	if !ok {
		if cur.SampleNs-d.clockFirst.SampleNs >= 10*minClockSpan {
			// No kernel HZ fits: start over rather than trust one.
			if !d.clockWarned {
				d.clockWarned = true
				d.log.Warn("programs' clock: no kernel HZ fits jiffies against the coarse clock; the programs read the kernel's clock",
					"jiffies", cur.SampleJiffies-d.clockFirst.SampleJiffies, "ns", cur.SampleNs-d.clockFirst.SampleNs)
			}
			d.clockFirst = cur
		}
		return nil
	}
	if err := d.runClockSync(tick, false); err != nil {
		return err
	}
	d.clockPending = tick
	return nil
}

// Clock reads dpd_clock (tick 0: not calibrated).
func (d *Datapath) Clock() (ClockState, error) {
	var c ClockState
	if err := d.objs.DpdClock.Lookup(uint32(0), &c); err != nil {
		return c, fmt.Errorf("read clock: %w", err)
	}
	return c, nil
}

// runClockSync runs dpd_clock_sync, again when a tick passed between its
// two reads.
func (d *Datapath) runClockSync(tick uint64, publish bool) error {
	pub := uint32(0)
	if publish {
		pub = 1
	}
	for range 3 {
		ret, err := runControl(d.objs.DpdClockSync, uint32(tick), uint32(tick>>32), pub)
		if err != nil {
			return fmt.Errorf("sync clock: %w", err)
		}
		switch ret {
		case 0:
			return nil
		case 2:
			continue
		}
		return fmt.Errorf("sync clock: program refused (%d)", ret)
	}
	return fmt.Errorf("sync clock: a tick passed during each of 3 samples")
}

// kernelHZ are the values CONFIG_HZ takes (kernel/Kconfig.hz, which the
// architectures dpd runs on use). A kernel with another HZ finds no fit,
// and its programs read the kernel's clock.
var kernelHZ = []uint64{100, 250, 300, 1000}

// tickOf is the tick between two samples (jiffies, coarse ns): the
// TICK_NSEC of the one kernel HZ whose tick fits their ratio to within the
// samples' uncertainty (a tick and a half at each end, and the clock's
// frequency correction), when they are minClockSpan or more apart. No fit,
// or two: not yet (a longer span may tell).
func tickOf(j0, ns0, j1, ns1 uint64) (uint64, bool) {
	if j1 <= j0 || ns1 < ns0 || ns1-ns0 < minClockSpan {
		return 0, false
	}
	dj := float64(j1 - j0)
	ratio := float64(ns1-ns0) / dj
	tol := 3/dj + 0.001
	var found uint64
	for _, hz := range kernelHZ {
		tick := (1_000_000_000 + hz/2) / hz
		if math.Abs(ratio-float64(tick)) <= tol*float64(tick) {
			if found != 0 {
				return 0, false
			}
			found = tick
		}
	}
	return found, found != 0
}
