package tcbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// SetIfState maps ifindex to its endpoint slot. Packets are policed only
// while flags has abi.IfReady; until then the entry programs drop them.
//
// The entry lives in dpd_ifstate and, for an ifindex below
// abi.IfStateArrEntries, in dpd_ifstate_arr too, which the entry
// programs read instead (bpf/dpd_ifstate.h). An entry that gains
// abi.IfReady is written there last, and one that loses it first, so
// neither write's failure leaves the programs policing with more than
// the caller asked. When the array write of an entry gaining it fails,
// the hash entry is put back, so nothing (an adoption, the next Open's
// sync) takes up a slot the caller was told did not take.
func (d *Datapath) SetIfState(ifindex int, slot uint32, flags uint32) error {
	if slot >= d.sizes.Slots() {
		return fmt.Errorf("set ifstate %d: slot %d beyond jump map capacity %d", ifindex, slot, d.sizes.Slots())
	}
	d.ifMu.Lock()
	defer d.ifMu.Unlock()
	var old bpf.DpdDpdIfstate
	err := d.objs.DpdIfstate.Lookup(uint32(ifindex), &old)
	had := err == nil
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("set ifstate %d: read: %w", ifindex, err)
	}
	ready := flags&abi.IfReady != 0
	if !ready {
		if err := d.setIfStateArr(ifindex, slot, flags); err != nil {
			return err
		}
	}
	v := bpf.DpdDpdIfstate{Slot: slot, Flags: flags}
	if err := d.objs.DpdIfstate.Update(uint32(ifindex), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set ifstate %d: %w", ifindex, err)
	}
	if !ready {
		return nil
	}
	if err := d.setIfStateArr(ifindex, slot, flags); err != nil {
		var undo error
		if had {
			undo = d.objs.DpdIfstate.Update(uint32(ifindex), &old, ebpf.UpdateAny)
		} else {
			undo = d.objs.DpdIfstate.Delete(uint32(ifindex))
		}
		if undo != nil {
			undo = fmt.Errorf("set ifstate %d: restore: %w", ifindex, undo)
		}
		return errors.Join(err, undo)
	}
	return nil
}

// DeleteIfState forgets ifindex; absent is not an error.
func (d *Datapath) DeleteIfState(ifindex int) error {
	d.ifMu.Lock()
	defer d.ifMu.Unlock()
	if err := d.setIfStateArr(ifindex, 0, 0); err != nil {
		return err
	}
	err := d.objs.DpdIfstate.Delete(uint32(ifindex))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete ifstate %d: %w", ifindex, err)
	}
	return nil
}

// setIfStateArr writes ifindex's dpd_ifstate_arr entry in one store
// (dpd_ifstate_set); an ifindex beyond the array has none.
func (d *Datapath) setIfStateArr(ifindex int, slot, flags uint32) error {
	if ifindex <= 0 || ifindex >= abi.IfStateArrEntries {
		return nil
	}
	ret, err := runControl(d.objs.DpdIfstateSet, uint32(ifindex), slot, flags)
	if err != nil {
		return fmt.Errorf("set ifstate %d: %w", ifindex, err)
	}
	if ret != 0 {
		return fmt.Errorf("set ifstate %d: dpd_ifstate_set refused (%d)", ifindex, ret)
	}
	return nil
}

// syncIfStateArr makes dpd_ifstate_arr hold exactly dpd_ifstate's
// entries below abi.IfStateArrEntries, before any entry program of this
// Datapath runs: the array is new on a node upgraded from a dpd without
// it, and a dpd that stopped between the two writes of an entry left them
// apart. One batch read of the array; a write only where they differ.
func (d *Datapath) syncIfStateArr() error {
	d.ifMu.Lock()
	defer d.ifMu.Unlock()
	want, err := d.IfStates()
	if err != nil {
		return fmt.Errorf("sync ifstate array: %w", err)
	}
	return d.eachIfStateArr(func(i int, have bpf.DpdDpdIfstate) error {
		w := want[i]
		if have == (bpf.DpdDpdIfstate{Slot: w.Slot, Flags: w.Flags}) {
			return nil
		}
		if err := d.setIfStateArr(i, w.Slot, w.Flags); err != nil {
			return fmt.Errorf("sync ifstate array: %w", err)
		}
		return nil
	})
}

// ifStateArrBatch is how many array entries one batch read returns: the
// whole array at once would cost Open 3 MiB of buffers.
const ifStateArrBatch = 8192

// eachIfStateArr calls fn with every dpd_ifstate_arr entry, read in
// batches (an array's batch returns its entries in index order).
func (d *Datapath) eachIfStateArr(fn func(int, bpf.DpdDpdIfstate) error) error {
	keys := make([]uint32, ifStateArrBatch)
	vals := make([]bpf.DpdDpdIfstate, ifStateArrBatch)
	var cursor ebpf.MapBatchCursor
	for {
		c, err := d.objs.DpdIfstateArr.BatchLookup(&cursor, keys, vals, nil)
		for i := range c {
			if ferr := fn(int(keys[i]), vals[i]); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sync ifstate array: read: %w", err)
		}
		if c == 0 {
			return fmt.Errorf("sync ifstate array: read: a batch returned nothing")
		}
	}
}

// IfState reads the entry of ifindex.
func (d *Datapath) IfState(ifindex int) (slot, flags uint32, ok bool, err error) {
	var v bpf.DpdDpdIfstate
	err = d.objs.DpdIfstate.Lookup(uint32(ifindex), &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("read ifstate %d: %w", ifindex, err)
	}
	return v.Slot, v.Flags, true, nil
}

// InstallPolicy puts prog at the slot's jump index for dir. The kernel
// swaps the entry atomically: a packet runs either the old or the new one.
func (d *Datapath) InstallPolicy(slot uint32, dir int, prog *ebpf.Program) error {
	idx, err := d.policyIndex(slot, dir)
	if err != nil {
		return err
	}
	if prog == nil {
		return fmt.Errorf("install policy slot %d dir %d: nil program", slot, dir)
	}
	if err := d.objs.DpdJump.Update(idx, prog, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("install policy slot %d dir %d: %w", slot, dir, err)
	}
	return nil
}

// ClearPolicy empties the slot's jump index for dir: its packets drop.
func (d *Datapath) ClearPolicy(slot uint32, dir int) error {
	idx, err := d.policyIndex(slot, dir)
	if err != nil {
		return err
	}
	err = d.objs.DpdJump.Delete(idx)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("clear policy slot %d dir %d: %w", slot, dir, err)
	}
	return nil
}

func (d *Datapath) policyIndex(slot uint32, dir int) (uint32, error) {
	if dir != abi.DirFromWEP && dir != abi.DirToWEP {
		return 0, fmt.Errorf("policy slot %d: bad direction %d", slot, dir)
	}
	if slot >= d.sizes.Slots() {
		return 0, fmt.Errorf("policy slot %d beyond jump map capacity %d", slot, d.sizes.Slots())
	}
	return abi.PolicyJumpIndex(slot, dir), nil
}
