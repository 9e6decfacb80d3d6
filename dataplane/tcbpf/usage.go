package tcbpf

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// IPSetEntries is how many dpd_ipsets entries this Datapath wrote, from
// its mirror of the map: no map is read.
func (d *Datapath) IPSetEntries() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, s := range d.sets {
		n += len(s.members)
	}
	return n
}

// counterMirror is the set of dpd_rule_ctrs keys: only userspace creates
// and deletes them (the programs add to existing entries), so after one
// read of what an earlier dpd left, EnsureCounters and DeleteCounters keep
// it exact.
type counterMirror struct {
	mu  sync.Mutex
	ids map[uint64]struct{} // nil until seeded from the map
}

func (c *counterMirror) addLocked(id uint64) {
	if c.ids != nil {
		c.ids[id] = struct{}{}
	}
}

func (c *counterMirror) removeLocked(id uint64) {
	if c.ids != nil {
		delete(c.ids, id)
	}
}

// RuleCounterEntries is how many entries dpd_rule_ctrs holds, from the
// mirror; the first call reads the map once to learn what was there
// before this process.
func (d *Datapath) RuleCounterEntries() (int, error) {
	d.ctrs.mu.Lock()
	defer d.ctrs.mu.Unlock()
	if d.ctrs.ids == nil {
		ids, err := d.CounterIDs()
		if err != nil {
			return 0, err
		}
		d.ctrs.ids = make(map[uint64]struct{}, len(ids))
		for _, id := range ids {
			d.ctrs.ids[id] = struct{}{}
		}
	}
	return len(d.ctrs.ids), nil
}

// CountConntrack counts the entries of the conntrack maps in batches: one
// map read per ctCountBatch entries where the kernel has batch lookups,
// one per entry where it does not.
func (d *Datapath) CountConntrack() (int, error) {
	total := 0
	for _, m := range d.ctMaps() {
		n, err := countCT(m)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func countCT(m *ebpf.Map) (int, error) {
	const ctCountBatch = 8192
	keys := make([]ctKey, ctCountBatch)
	vals := make([]ctVal, ctCountBatch)
	var cur ebpf.MapBatchCursor
	entries := 0
	for first := true; ; first = false {
		n, err := m.BatchLookup(&cur, keys, vals, nil)
		entries += n
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return entries, nil
		case first && errors.Is(err, ebpf.ErrNotSupported):
			return countCTByKey(m)
		case err != nil:
			return entries, fmt.Errorf("count conntrack: %w", err)
		}
	}
}

func countCTByKey(m *ebpf.Map) (int, error) {
	var k ctKey
	next := new(ctKey)
	var prev any // nil asks for the first key
	for n := 0; ; n++ {
		err := m.NextKey(prev, next)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("count conntrack: %w", err)
		}
		k = *next
		prev = &k
	}
}
