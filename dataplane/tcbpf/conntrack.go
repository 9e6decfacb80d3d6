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
// the current time. The programs stamp entries with bpf_ktime_get_coarse_ns
// (CLOCK_MONOTONIC_COARSE, tick granularity): in a VM the precise clock cost
// more than half of an established packet's time.
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
func (d *Datapath) ScanConntrackFlows(now time.Time, ended, live func(*CTKey, *CTVal)) (expired int, err error) {
	kt, err := ktime(now)
	if err != nil {
		return 0, err
	}
	s := &ctSweep{d: d, kt: kt, ended: ended, live: live, countLegacy: d.ctFlags.Load() != 0}
	err = d.ctWalkBatches(s.batch)
	if errors.Is(err, errNoBatchOps) {
		err = s.oneByOne()
	}
	if err != nil {
		return s.expired, err
	}
	d.retireCTLegacy(s.legacy)
	return s.expired, nil
}

// ctSweep is one conntrack scan under way.
type ctSweep struct {
	d           *Datapath
	kt          uint64 // now on the programs' clock
	ended, live func(*CTKey, *CTVal)
	countLegacy bool // only while there is something to retire
	legacy      int  // entries of the legacy layout left
	expired     int
	dead        []ctKey
	deadVals    []ctVal
}

// batch handles one batch of the walk: every entry alive is reported,
// every expired one deleted with the batch's other expired ones.
func (s *ctSweep) batch(keys []ctKey, vals []ctVal) error {
	s.dead, s.deadVals = s.dead[:0], s.deadVals[:0]
	for i := range keys {
		if s.walked(&keys[i], &vals[i]) {
			s.dead = append(s.dead, keys[i])
			s.deadVals = append(s.deadVals, vals[i])
		}
	}
	for len(s.dead) > 0 {
		n, err := s.d.objs.DpdCt.BatchDelete(s.dead, nil)
		n = min(max(n, 0), len(s.dead))
		for i := range n {
			s.gone(&s.dead[i], &s.deadVals[i])
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ebpf.ErrKeyNotExist) && n < len(s.dead):
			// Evicted since the read: not ours to report, but gone. The
			// kernel stopped at it; go on after it.
			s.leftMap(&s.dead[n])
			s.dead, s.deadVals = s.dead[n+1:], s.deadVals[n+1:]
		default:
			return fmt.Errorf("expire conntrack entries: %w", err)
		}
	}
	return nil
}

// walked accounts for an entry as the walk read it: counted when legacy,
// reported when alive; true when it has expired.
func (s *ctSweep) walked(k *ctKey, v *ctVal) (expired bool) {
	if s.countLegacy && ctLegacy(k) {
		s.legacy++
	}
	if ctExpired(v, k.Proto, s.kt) {
		return true
	}
	if s.live != nil {
		s.live(k, v)
	}
	return false
}

// leftMap accounts for an expired entry that is no longer in the map,
// whoever deleted it.
func (s *ctSweep) leftMap(k *ctKey) {
	if s.countLegacy && ctLegacy(k) {
		s.legacy--
	}
}

// gone accounts for an entry the sweep deleted, as last read.
func (s *ctSweep) gone(k *ctKey, v *ctVal) {
	s.expired++
	s.leftMap(k)
	if s.ended != nil && k.Dir != abi.DirNAT {
		s.ended(k, v)
	}
}

// oneByOne is the sweep where the kernel has no batch operations: a walk
// that collects the expired keys, then a re-read and a delete for each
// (deleting while iterating by next-key would restart the iteration).
func (s *ctSweep) oneByOne() error {
	var cands []ctKey
	err := s.d.ctIterate(func(k *ctKey, v *ctVal) {
		if s.walked(k, v) {
			cands = append(cands, *k)
		}
	})
	if err != nil {
		return err
	}
	var v ctVal
	for i := range cands {
		err := s.d.objs.DpdCt.Lookup(&cands[i], &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			s.leftMap(&cands[i])
			continue
		}
		if err != nil {
			return fmt.Errorf("re-read conntrack entry: %w", err)
		}
		if !ctExpired(&v, cands[i].Proto, s.kt) {
			if s.live != nil {
				s.live(&cands[i], &v) // refreshed meanwhile
			}
			continue
		}
		err = s.d.objs.DpdCt.Delete(&cands[i])
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			s.leftMap(&cands[i])
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

// ConntrackEntries counts the entries currently in dpd_ct (live or not).
func (d *Datapath) ConntrackEntries() (int, error) {
	n := 0
	err := d.ctWalk(func(*ctKey, *ctVal) { n++ })
	return n, err
}

// ctWalk calls fn for every entry, in batches where the kernel has batch
// lookups (two syscalls per entry otherwise).
func (d *Datapath) ctWalk(fn func(*ctKey, *ctVal)) error {
	err := d.ctWalkBatches(func(keys []ctKey, vals []ctVal) error {
		for i := range keys {
			fn(&keys[i], &vals[i])
		}
		return nil
	})
	if errors.Is(err, errNoBatchOps) {
		return d.ctIterate(fn)
	}
	return err
}

// errNoBatchOps says the kernel has no batch map operations.
var errNoBatchOps = errors.New("no batch map operations")

// ctWalkBatches calls fn with every batch of up to ctBatch entries; fn may
// delete entries of its batch. errNoBatchOps before any batch where the
// kernel has no batch lookups.
func (d *Datapath) ctWalkBatches(fn func([]ctKey, []ctVal) error) error {
	const ctBatch = 4096
	keys := make([]ctKey, ctBatch)
	vals := make([]ctVal, ctBatch)
	var cur ebpf.MapBatchCursor
	for first := true; ; first = false {
		n, err := d.objs.DpdCt.BatchLookup(&cur, keys, vals, nil)
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

func (d *Datapath) ctIterate(fn func(*ctKey, *ctVal)) error {
	var k ctKey
	var v ctVal
	it := d.objs.DpdCt.Iterate()
	for it.Next(&k, &v) {
		fn(&k, &v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("walk conntrack: %w", err)
	}
	return nil
}
