package tcbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// A node upgraded from an older dpd has that dpd's conntrack: dpd_ct, an
// LRU hash, perhaps with keys of a dpd before normalized keys, read by the
// entry programs still attached until each interface gets this dpd's.
// Their flows must go on, so dpd_ct_cfg tells the programs where to look
// and write (abi.CTCfg*); the scan moves dpd_ct's entries into
// dpd_conntrack once nothing reads dpd_ct alone, and when it has stayed
// empty dpd_ct is unpinned. Its memory goes with the programs that hold it
// (at the next restart): until then a node pays for both maps.

// ctStandIn is the size of the dpd_ct a node without an older one gets:
// the programs need a map there, not 512,000 preallocated entries. It is
// pinned like every map the entry programs use, so a restarted dpd finds
// its attached programs current.
const ctStandIn = 1

// prepareCTOld makes spec's dpd_ct the pinned one as it is; old says it is
// an older dpd's conntrack, not a stand-in.
func prepareCTOld(spec *ebpf.CollectionSpec, pinDir string) (old bool, err error) {
	ms, ok := spec.Maps[abi.MapConntrackLRU]
	if !ok {
		return false, fmt.Errorf("entry object has no %s", abi.MapConntrackLRU)
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, abi.MapConntrackLRU), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		ms.MaxEntries = ctStandIn
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open pinned %s: %w", abi.MapConntrackLRU, err)
	}
	defer func() { _ = m.Close() }()
	ms.MaxEntries = m.MaxEntries()
	return ms.MaxEntries != ctStandIn, nil
}

// setCTCfg writes dpd_ct_cfg's flags (abi.CTCfg*).
func (d *Datapath) setCTCfg(flags uint32) error {
	cfg := bpf.DpdDpdCtCfg{Flags: flags}
	if err := d.objs.DpdCtCfg.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write %s: %w", abi.MapCTCfg, err)
	}
	d.ctFlags.Store(flags)
	d.ctClean.Store(0)
	return nil
}

// initCTCfg sets dpd_ct_cfg before anything of this Datapath can write or
// read an entry (the epilogue it installs is shared with the entry
// programs already attached). A pinned dpd_ct with entries, or interface
// state beside it, may hold entries of either key layout; entry programs
// of an older dpd still attached, or a doubt about them, mean entries are
// written where and how they read them. Without either everything is off
// from the start, and an empty dpd_ct goes at once.
func (d *Datapath) initCTCfg() error {
	if !d.ctOld {
		return d.setCTCfg(0)
	}
	var k ctKey
	var ifindex uint32
	errCT := d.objs.DpdCt.NextKey(nil, &k)
	errIf := d.objs.DpdIfstate.NextKey(nil, &ifindex)
	if errors.Is(errCT, ebpf.ErrKeyNotExist) && errors.Is(errIf, ebpf.ErrKeyNotExist) {
		if err := d.setCTCfg(0); err != nil {
			return err
		}
		return d.unpinCTOld()
	}
	flags := uint32(abi.CTCfgLRU | abi.CTCfgLegacy)
	stale, err := d.staleEntryPrograms()
	if err != nil {
		d.log.Warn("cannot tell whether older entry programs run; writing conntrack entries they read", "err", err)
	}
	if err != nil || stale > 0 {
		flags |= abi.CTCfgWriteLRU | abi.CTCfgWriteLegacy
	}
	return d.setCTCfg(flags)
}

// ctCleanScans is how many scans in a row must find dpd_ct empty, with no
// older entry program, before the programs stop looking there: an older
// program replaced between one scan's walk and its program check may have
// written an entry the walk missed, which the next walk sees.
const ctCleanScans = 2

// retireCTOld is the scan's end (left: the live entries still in dpd_ct).
// Once no older entry program runs, entries are written to dpd_conntrack
// only (the next scan moves dpd_ct's over); once ctCleanScans scans in a
// row found dpd_ct empty, the programs stop looking there and it is
// unpinned. Any doubt keeps the lookups, which cost a new flow a lookup
// more, where dropping them early could drop replies. Failures are logged,
// not returned: the scan's own work is done.
func (d *Datapath) retireCTOld(left int) {
	flags := d.ctFlags.Load()
	if flags == 0 {
		return
	}
	stale, err := d.staleEntryPrograms()
	if err != nil {
		d.ctClean.Store(0)
		d.log.Warn("conntrack scan: cannot tell whether older entry programs run; keeping the older conntrack", "err", err)
		return
	}
	switch {
	case stale > 0:
		d.ctClean.Store(0)
	case flags&(abi.CTCfgWriteLRU|abi.CTCfgWriteLegacy) != 0:
		err = d.setCTCfg(flags &^ (abi.CTCfgWriteLRU | abi.CTCfgWriteLegacy))
	case left > 0:
		d.ctClean.Store(0)
	case d.ctClean.Add(1) >= ctCleanScans:
		if err = d.setCTCfg(0); err == nil {
			err = d.unpinCTOld()
		}
	}
	if err != nil {
		d.log.Warn("conntrack scan: older conntrack", "err", err)
	}
}

// unpinCTOld removes dpd_ct's pin; the map lives on while programs hold
// it, and the next start pins a stand-in.
func (d *Datapath) unpinCTOld() error {
	if err := os.Remove(filepath.Join(d.opts.PinDir, abi.MapConntrackLRU)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin %s: %w", abi.MapConntrackLRU, err)
	}
	d.log.Info("older conntrack map retired", "map", abi.MapConntrackLRU)
	return nil
}

// moveCTEntry moves a live dpd_ct entry into dpd_conntrack, normalized,
// and returns it as it is there now; nil when it stays (dpd_conntrack has
// no room) or is gone (deleted meanwhile, by a service flush: then so is
// its copy). One already in dpd_conntrack is newer (written after the
// programs stopped writing dpd_ct) and wins. A hit on the old entry
// between the copy and its delete is lost, as a packet's count at most.
func (d *Datapath) moveCTEntry(k ctKey, v ctVal) (nk *ctKey, nv *ctVal, stays bool, err error) {
	old := k
	if ctLegacy(&k) {
		ctSwap(&k)
		v.Flags |= abi.CTFOrigHi
	}
	copied := true
	switch err := d.objs.DpdConntrack.Update(&k, &v, ebpf.UpdateNoExist); {
	case errors.Is(err, unix.E2BIG), errors.Is(err, unix.ENOMEM):
		return nil, nil, true, nil
	case errors.Is(err, ebpf.ErrKeyExist):
		copied = false
		if err := d.objs.DpdConntrack.Lookup(&k, &v); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil, false, fmt.Errorf("move conntrack entry: %w", err)
		}
	case err != nil:
		return nil, nil, false, fmt.Errorf("move conntrack entry: %w", err)
	}
	switch err := d.objs.DpdCt.Delete(&old); {
	case errors.Is(err, ebpf.ErrKeyNotExist) && copied:
		if err := d.objs.DpdConntrack.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil, false, fmt.Errorf("move conntrack entry: undo the copy of a deleted one: %w", err)
		}
		return nil, nil, false, nil
	case err != nil && !errors.Is(err, ebpf.ErrKeyNotExist):
		return nil, nil, false, fmt.Errorf("move conntrack entry: %w", err)
	}
	return &k, &v, false, nil
}
