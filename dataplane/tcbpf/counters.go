package tcbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
)

// EnsureCounters creates zeroed per-rule counters for ids that have none;
// existing counters keep their counts. The epilogue only adds to entries
// that exist, so a rule without one is simply not counted.
func (d *Datapath) EnsureCounters(ids []uint64) error {
	d.ctrs.mu.Lock()
	defer d.ctrs.mu.Unlock()
	zero := make([]bpf.DpdDpdCounter, ebpf.MustPossibleCPU())
	for _, id := range ids {
		if id == 0 {
			continue // rule id 0 means "no rule"
		}
		err := d.objs.DpdRuleCtrs.Update(id, zero, ebpf.UpdateNoExist)
		if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("create counter %d: %w", id, err)
		}
		d.ctrs.addLocked(id)
	}
	return nil
}

// DeleteCounters drops the counters of ids; absent ones are not an error.
func (d *Datapath) DeleteCounters(ids []uint64) error {
	d.ctrs.mu.Lock()
	defer d.ctrs.mu.Unlock()
	for _, id := range ids {
		err := d.objs.DpdRuleCtrs.Delete(id)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete counter %d: %w", id, err)
		}
		d.ctrs.removeLocked(id)
	}
	return nil
}

// ReadCounter sums a rule's per-CPU counters.
func (d *Datapath) ReadCounter(id uint64) (packets, bytes uint64, err error) {
	var per []bpf.DpdDpdCounter
	if err := d.objs.DpdRuleCtrs.Lookup(id, &per); err != nil {
		return 0, 0, fmt.Errorf("read counter %d: %w", id, err)
	}
	for _, c := range per {
		packets += c.Packets
		bytes += c.Bytes
	}
	return packets, bytes, nil
}
