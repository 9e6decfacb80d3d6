package tcbpf

import (
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

// CountConntrack counts the entries of the conntrack maps (live or not),
// an older dpd's dpd_ct included while it may hold any: one map read per
// batch where the kernel has batch lookups, two per entry where it does
// not.
func (d *Datapath) CountConntrack() (int, error) {
	n := 0
	err := d.ctWalk(func(*ebpf.Map, *ctKey, *ctVal) { n++ })
	return n, err
}
