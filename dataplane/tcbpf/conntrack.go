package tcbpf

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

type (
	ctKey = bpf.DpdDpdCtKey
	ctVal = bpf.DpdDpdCtVal
	// CTKey and CTVal are a conntrack entry as the programs write it.
	CTKey = bpf.DpdDpdCtKey
	CTVal = bpf.DpdDpdCtVal
)

// CTTimeout is the idle timeout of an entry, the same rule the programs
// apply (dpd_ct_timeout_ns in bpf/dpd_ct.h; values in abi).
func CTTimeout(proto uint8, flags uint32) time.Duration {
	switch proto {
	case unix.IPPROTO_TCP:
		if flags&abi.CTFClosed == abi.CTFClosed {
			return abi.CTTimeoutTCPClosedS * time.Second
		}
		if flags&(abi.CTFEstablished|abi.CTFClosing) == abi.CTFEstablished {
			return abi.CTTimeoutTCPEstS * time.Second
		}
		return abi.CTTimeoutTCPOtherS * time.Second
	case unix.IPPROTO_UDP:
		return abi.CTTimeoutUDPS * time.Second
	case unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6:
		return abi.CTTimeoutICMPS * time.Second
	}
	return abi.CTTimeoutOtherS * time.Second
}

// ktime converts a wall-clock instant to the programs' clock, relative to
// the current time. The programs stamp entries with CLOCK_MONOTONIC_COARSE
// (tick granularity; in a VM the precise clock cost more than half of an
// established packet's time), read as calibrated jiffies (clock.go).
func ktime(now time.Time) (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0, fmt.Errorf("read monotonic clock: %w", err)
	}
	return uint64(ts.Nano() + int64(time.Until(now))), nil
}

func ctExpired(v *ctVal, proto uint8, kt uint64) bool {
	return int64(kt-v.LastSeen) >= int64(CTTimeout(proto, v.Flags))
}

// ScanConntrack deletes the entries idle past their timeout at now
// (ScanConntrackFlows says how).
func (d *Datapath) ScanConntrack(now time.Time) (expired int, err error) {
	return d.ScanConntrackEnded(now, nil)
}

// ScanConntrackEnded is ScanConntrack calling ended (when not nil) with
// each flow entry it deleted, as last read: the flow ended. NAT entries
// (dir DirNAT) are deleted without a call: they are not flows of a hook.
func (d *Datapath) ScanConntrackEnded(now time.Time, ended func(*CTKey, *CTVal)) (expired int, err error) {
	return d.ScanConntrackFlows(now, ended, nil)
}

// ScanConntrackFlows is ScanConntrackEnded also calling live (when not
// nil) with every entry it found alive, NAT entries included: together
// the two calls see every entry that existed throughout the scan once.
//
// The expired entries of each batch the walk reads are deleted at once,
// in one syscall: a node that opens thousands of connections a second
// expires thousands of entries a second, and a lookup and a delete each
// would cost dpd two syscalls per entry. What that gives up is small: an
// entry refreshed between its batch's read and the delete (the time to go
// through one batch of up to 4,096 entries, at most a few milliseconds)
// goes, and its next packet is a new flow, as if it had expired a moment
// later; a re-read per entry narrowed that window to two syscalls.
//
// While an older dpd's dpd_ct may hold entries, it is scanned after
// dpd_conntrack, and once no entry program that reads only dpd_ct runs,
// its live entries move into dpd_conntrack (normalized; live reports them
// as they are there now), so it empties and can go (ctold.go).
func (d *Datapath) ScanConntrackFlows(now time.Time, ended, live func(*CTKey, *CTVal)) (expired int, err error) {
	kt, err := ktime(now)
	if err != nil {
		return 0, err
	}
	flags := d.ctFlags.Load()
	s := &ctSweep{d: d, m: d.objs.DpdConntrack, kt: kt, ended: ended, live: live}
	if err := s.run(); err != nil {
		return s.expired, err
	}
	if flags&abi.CTCfgLRU == 0 {
		return s.expired, nil
	}
	old := &ctSweep{d: d, m: d.objs.DpdCt, kt: kt, ended: ended, live: live, move: flags&abi.CTCfgWriteLRU == 0}
	err = old.run()
	if err != nil {
		return s.expired + old.expired, err
	}
	d.retireCTOld(old.left)
	return s.expired + old.expired, nil
}

// ctSweep is one conntrack map's scan under way.
type ctSweep struct {
	d           *Datapath
	m           *ebpf.Map
	kt          uint64 // now on the programs' clock
	ended, live func(*CTKey, *CTVal)
	move        bool // live entries move into dpd_conntrack (m is dpd_ct)
	expired     int
	left        int // live entries left in m
	dead        []ctKey
	deadVals    []ctVal
}

func (s *ctSweep) run() error {
	err := ctWalkBatches(s.m, s.batch)
	if errors.Is(err, errNoBatchOps) {
		err = s.oneByOne()
	}
	return err
}

// batch handles one batch of the walk: every entry alive is reported (and
// moved, or counted as left), every expired one deleted with the batch's
// other expired ones.
func (s *ctSweep) batch(keys []ctKey, vals []ctVal) error {
	s.dead, s.deadVals = s.dead[:0], s.deadVals[:0]
	for i := range keys {
		if ctExpired(&vals[i], keys[i].Proto, s.kt) {
			s.dead = append(s.dead, keys[i])
			s.deadVals = append(s.deadVals, vals[i])
		} else if err := s.alive(&keys[i], &vals[i]); err != nil {
			return err
		}
	}
	for len(s.dead) > 0 {
		n, err := s.m.BatchDelete(s.dead, nil)
		n = min(max(n, 0), len(s.dead))
		for i := range n {
			s.gone(&s.dead[i], &s.deadVals[i])
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ebpf.ErrKeyNotExist) && n < len(s.dead):
			// Deleted (or evicted) since the read: not ours to report.
			// The kernel stopped at it; go on after it.
			s.dead, s.deadVals = s.dead[n+1:], s.deadVals[n+1:]
		default:
			return fmt.Errorf("expire conntrack entries: %w", err)
		}
	}
	return nil
}

// alive accounts for an entry the walk found live: moved when the sweep
// moves, reported as it now is.
func (s *ctSweep) alive(k *ctKey, v *ctVal) error {
	if !s.move {
		s.left++
		if s.live != nil {
			s.live(k, v)
		}
		return nil
	}
	nk, nv, stays, err := s.d.moveCTEntry(*k, *v)
	switch {
	case err != nil:
		return err
	case stays: // no room in dpd_conntrack: where the programs still look
		s.left++
		nk, nv = k, v
	case nk == nil:
		return nil // deleted meanwhile
	}
	if s.live != nil {
		s.live(nk, nv)
	}
	return nil
}

// gone accounts for an entry the sweep deleted, as last read.
func (s *ctSweep) gone(k *ctKey, v *ctVal) {
	s.expired++
	if s.ended != nil && k.Dir != abi.DirNAT {
		s.ended(k, v)
	}
}

// oneByOne is the sweep where the kernel has no batch operations: a walk
// that collects the expired keys, then a re-read and a delete for each
// (deleting while iterating by next-key would restart the iteration).
func (s *ctSweep) oneByOne() error {
	var cands, live []ctKey
	var liveVals []ctVal
	err := ctIterate(s.m, func(k *ctKey, v *ctVal) {
		if ctExpired(v, k.Proto, s.kt) {
			cands = append(cands, *k)
		} else {
			live, liveVals = append(live, *k), append(liveVals, *v)
		}
	})
	if err != nil {
		return err
	}
	for i := range live {
		if err := s.alive(&live[i], &liveVals[i]); err != nil {
			return err
		}
	}
	var v ctVal
	for i := range cands {
		err := s.m.Lookup(&cands[i], &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("re-read conntrack entry: %w", err)
		}
		if !ctExpired(&v, cands[i].Proto, s.kt) {
			if err := s.alive(&cands[i], &v); err != nil { // refreshed meanwhile
				return err
			}
			continue
		}
		err = s.m.Delete(&cands[i])
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("expire conntrack entry: %w", err)
		}
		s.gone(&cands[i], &v)
	}
	return nil
}

// RunConntrackScanner scans every interval until ctx ends.
func (d *Datapath) RunConntrackScanner(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := d.ScanConntrack(time.Now())
			if err != nil {
				d.log.Warn("conntrack scan failed", "err", err)
			} else if n > 0 {
				d.log.Debug("conntrack entries expired", "count", n)
			}
		}
	}
}

// ctMaps are the conntrack maps the programs read: dpd_conntrack, and an
// older dpd's dpd_ct while it may hold entries.
func (d *Datapath) ctMaps() []*ebpf.Map {
	if d.ctFlags.Load()&abi.CTCfgLRU != 0 {
		return []*ebpf.Map{d.objs.DpdConntrack, d.objs.DpdCt}
	}
	return []*ebpf.Map{d.objs.DpdConntrack}
}

// ctWalk calls fn for every entry of every conntrack map, in batches where
// the kernel has batch lookups (two syscalls per entry otherwise).
func (d *Datapath) ctWalk(fn func(*ebpf.Map, *ctKey, *ctVal)) error {
	for _, m := range d.ctMaps() {
		err := ctWalkBatches(m, func(keys []ctKey, vals []ctVal) error {
			for i := range keys {
				fn(m, &keys[i], &vals[i])
			}
			return nil
		})
		if errors.Is(err, errNoBatchOps) {
			err = ctIterate(m, func(k *ctKey, v *ctVal) { fn(m, k, v) })
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errNoBatchOps says the kernel has no batch map operations.
var errNoBatchOps = errors.New("no batch map operations")

// ctWalkBatches calls fn with every batch of up to ctBatch entries of m;
// fn may delete entries of its batch. errNoBatchOps before any batch where
// the kernel has no batch lookups.
func ctWalkBatches(m *ebpf.Map, fn func([]ctKey, []ctVal) error) error {
	const ctBatch = 4096
	keys := make([]ctKey, ctBatch)
	vals := make([]ctVal, ctBatch)
	var cur ebpf.MapBatchCursor
	for first := true; ; first = false {
		n, err := m.BatchLookup(&cur, keys, vals, nil)
		switch {
		case first && errors.Is(err, ebpf.ErrNotSupported):
			return errNoBatchOps
		case err != nil && !errors.Is(err, ebpf.ErrKeyNotExist):
			return fmt.Errorf("walk conntrack: %w", err)
		}
		if n > 0 {
			if ferr := fn(keys[:n], vals[:n]); ferr != nil {
				return ferr
			}
		}
		if err != nil {
			return nil // ErrKeyNotExist: the walk is done
		}
	}
}

func ctIterate(m *ebpf.Map, fn func(*ctKey, *ctVal)) error {
	var k ctKey
	var v ctVal
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(&k, &v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("walk conntrack: %w", err)
	}
	return nil
}
