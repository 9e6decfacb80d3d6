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
func (d *Datapath) SetIfState(ifindex int, slot uint32, flags uint32) error {
	if slot >= d.sizes.Slots() {
		return fmt.Errorf("set ifstate %d: slot %d beyond jump map capacity %d", ifindex, slot, d.sizes.Slots())
	}
	v := bpf.DpdDpdIfstate{Slot: slot, Flags: flags}
	if err := d.objs.DpdIfstate.Update(uint32(ifindex), &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set ifstate %d: %w", ifindex, err)
	}
	return nil
}

// DeleteIfState forgets ifindex; absent is not an error.
func (d *Datapath) DeleteIfState(ifindex int) error {
	err := d.objs.DpdIfstate.Delete(uint32(ifindex))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete ifstate %d: %w", ifindex, err)
	}
	return nil
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
