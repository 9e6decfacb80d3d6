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

// ScanConntrack deletes the entries idle past their timeout at now. Each
// is re-read before deletion, so a flow refreshed during the scan stays.
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
func (d *Datapath) ScanConntrackFlows(now time.Time, ended, live func(*CTKey, *CTVal)) (expired int, err error) {
	kt, err := ktime(now)
	if err != nil {
		return 0, err
	}
	var cands []ctKey
	legacy := 0
	countLegacy := d.ctFlags.Load() != 0 // nothing to retire otherwise
	err = d.ctWalk(func(k *ctKey, v *ctVal) {
		if countLegacy && ctLegacy(k) {
			legacy++
		}
		switch {
		case ctExpired(v, k.Proto, kt):
			cands = append(cands, *k)
		case live != nil:
			live(k, v)
		}
	})
	if err != nil {
		return 0, err
	}
	var v ctVal
	for i := range cands {
		if err := d.objs.DpdCt.Lookup(&cands[i], &v); err != nil {
			continue // gone already
		}
		if !ctExpired(&v, cands[i].Proto, kt) {
			if live != nil {
				live(&cands[i], &v) // refreshed meanwhile
			}
			continue
		}
		err := d.objs.DpdCt.Delete(&cands[i])
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return expired, fmt.Errorf("expire conntrack entry: %w", err)
		}
		expired++
		if countLegacy && ctLegacy(&cands[i]) {
			legacy--
		}
		if ended != nil && err == nil && cands[i].Dir != abi.DirNAT {
			ended(&cands[i], &v)
		}
	}
	d.retireCTLegacy(legacy)
	return expired, nil
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

// ctWalk calls fn for every entry, in batches of ctBatch where the kernel
// has batch lookups (two syscalls per entry otherwise).
func (d *Datapath) ctWalk(fn func(*ctKey, *ctVal)) error {
	const ctBatch = 4096
	keys := make([]ctKey, ctBatch)
	vals := make([]ctVal, ctBatch)
	var cur ebpf.MapBatchCursor
	for first := true; ; first = false {
		n, err := d.objs.DpdCt.BatchLookup(&cur, keys, vals, nil)
		for i := 0; i < n; i++ {
			fn(&keys[i], &vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil
		case first && errors.Is(err, ebpf.ErrNotSupported):
			return d.ctIterate(fn)
		case err != nil:
			return fmt.Errorf("walk conntrack: %w", err)
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
