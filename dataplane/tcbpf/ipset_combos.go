package tcbpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Combinations of sets. Every dpd_ipset_idx entry maps its prefix to the id
// of the combination of sets holding it, and a compiled policy that
// classifies by sets keeps, per combination holding one of its sets, the
// bitmap of its rules (polprog's dpd_pol_sets), told of them through
// WatchCombos. Ids are announced to the watchers before any entry maps to
// them and released only once no entry can (no failed write left an entry
// unsure), so a program never sees an id it has no right entry for; a
// restart keeps the ids the pinned map holds. Ids are not reused until
// they wrap around: a pinned program not yet adopted after a restart (so
// not watching) may keep the entry of a released id, which must not come
// to mean another combination.

// combo is one combination in use.
type combo struct {
	sets []uint32 // sorted
	refs int      // index entries (as the refs say) mapping to it
}

// comboWatch is one WatchCombos caller.
type comboWatch struct {
	sets   []uint32
	add    func(uint32, []uint32) error
	remove func(uint32) error
}

// comboTable is the combinations and their watchers. Guarded by
// Datapath.mu.
type comboTable struct {
	byKey map[string]uint32
	byID  map[uint32]*combo
	next  uint32 // the next id to try
	// fresh: created since the last announcement; unannounced: an
	// announcement failed, to retry; idle: no entry maps to them any more.
	fresh       []uint32
	unannounced map[uint32]bool
	idle        map[uint32]bool
	watches     map[int]*comboWatch
	nextWatch   int
	keyBuf      []byte                     // id's key
	bySet       map[uint32]map[int]bool    // set -> watches of it
	setCombos   map[uint32]map[uint32]bool // set -> combinations holding it
}

func newComboTable() comboTable {
	return comboTable{byKey: map[string]uint32{}, byID: map[uint32]*combo{}, next: 1,
		unannounced: map[uint32]bool{}, idle: map[uint32]bool{}, watches: map[int]*comboWatch{},
		bySet: map[uint32]map[int]bool{}, setCombos: map[uint32]map[uint32]bool{}}
}

func appendComboKey(b []byte, sets []uint32) []byte {
	for _, s := range sets {
		b = binary.LittleEndian.AppendUint32(b, s)
	}
	return b
}

func comboKey(sets []uint32) string { return string(appendComboKey(nil, sets)) }

// add records combination sets under id.
func (t *comboTable) add(id uint32, sets []uint32) {
	t.byKey[comboKey(sets)] = id
	t.byID[id] = &combo{sets: sets}
	for _, s := range sets {
		if t.setCombos[s] == nil {
			t.setCombos[s] = map[uint32]bool{}
		}
		t.setCombos[s][id] = true
	}
	t.idle[id] = true // until referenced
}

// claim gives sets the id the pinned map holds for one of its entries,
// when neither is taken (opening only; settle ends the claims).
func (t *comboTable) claim(id uint32, sets []uint32) {
	if id == 0 || t.byID[id] != nil {
		return
	}
	if _, ok := t.id(sets); ok {
		return
	}
	t.add(id, slices.Clone(sets))
	t.next = max(t.next, id+1)
}

// maxComboID bounds ids: dpd_pol_sets keys are id<<1 | side.
const maxComboID = 1<<31 - 1

// alloc returns an id not in use, the lowest above the last one given.
func (t *comboTable) alloc() uint32 {
	for {
		if t.next == 0 || t.next > maxComboID {
			t.next = 1
		}
		id := t.next
		t.next++
		if t.byID[id] == nil {
			return id
		}
	}
}

// id is the id of combination sets, if it exists.
func (t *comboTable) id(sets []uint32) (uint32, bool) {
	t.keyBuf = appendComboKey(t.keyBuf[:0], sets)
	id, ok := t.byKey[string(t.keyBuf)] // no allocation for the lookup
	return id, ok
}

// ref counts one more entry mapping to combination sets, creating it
// when new, and returns its id.
func (t *comboTable) ref(sets []uint32) uint32 {
	id, ok := t.id(sets)
	if !ok {
		id = t.alloc()
		t.add(id, slices.Clone(sets))
		t.fresh = append(t.fresh, id)
	}
	c := t.byID[id]
	c.refs++
	delete(t.idle, id)
	return id
}

// unref counts one entry fewer mapping to id.
func (t *comboTable) unref(id uint32) {
	c := t.byID[id]
	if c == nil {
		return
	}
	if c.refs--; c.refs <= 0 {
		c.refs = 0
		t.idle[id] = true
	}
}

// watchersOf are the watches of any set of c.
func (t *comboTable) watchersOf(c *combo) []*comboWatch {
	seen := map[int]bool{}
	var out []*comboWatch
	for _, s := range c.sets {
		for w := range t.bySet[s] {
			if !seen[w] {
				seen[w] = true
				out = append(out, t.watches[w])
			}
		}
	}
	return out
}

// announce tells the watchers of the new combinations (and of those a
// failed announcement left out) about them: before any entry maps to them.
func (t *comboTable) announce() error {
	var errs []error
	todo := t.fresh
	for id := range t.unannounced {
		todo = append(todo, id)
	}
	t.fresh = nil
	for _, id := range todo {
		c := t.byID[id]
		if c == nil {
			delete(t.unannounced, id)
			continue
		}
		failed := false
		for _, w := range t.watchersOf(c) {
			if err := w.add(id, c.sets); err != nil {
				errs = append(errs, err)
				failed = true
			}
		}
		if failed {
			t.unannounced[id] = true
		} else {
			delete(t.unannounced, id)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("announce ip set combinations: %w", errors.Join(errs...))
	}
	return nil
}

// release frees the combinations no entry maps to; only once no entry is
// unsure (one might still hold an id).
func (t *comboTable) release() error {
	var errs []error
	for id := range t.idle {
		c := t.byID[id]
		delete(t.idle, id)
		if c == nil || c.refs > 0 {
			continue
		}
		for _, w := range t.watchersOf(c) {
			// A watcher that keeps a stale entry is harmless: the id
			// is announced again before any entry maps to it.
			if err := w.remove(id); err != nil {
				errs = append(errs, err)
			}
		}
		delete(t.byKey, comboKey(c.sets))
		delete(t.byID, id)
		delete(t.unannounced, id)
		for _, s := range c.sets {
			delete(t.setCombos[s], id)
			if len(t.setCombos[s]) == 0 {
				delete(t.setCombos, s)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("retire ip set combinations: %w", errors.Join(errs...))
	}
	return nil
}

// watch registers a watcher of sets and announces the combinations
// holding one of them; stop ends it.
func (t *comboTable) watch(sets []uint32, add func(uint32, []uint32) error, remove func(uint32) error) (int, error) {
	ids := map[uint32]bool{}
	for _, s := range sets {
		for id := range t.setCombos[s] {
			ids[id] = true
		}
	}
	for id := range ids {
		if err := add(id, t.byID[id].sets); err != nil {
			return 0, fmt.Errorf("announce ip set combination %d: %w", id, err)
		}
	}
	n := t.nextWatch
	t.nextWatch++
	t.watches[n] = &comboWatch{sets: slices.Clone(sets), add: add, remove: remove}
	for _, s := range sets {
		if t.bySet[s] == nil {
			t.bySet[s] = map[int]bool{}
		}
		t.bySet[s][n] = true
	}
	return n, nil
}

func (t *comboTable) unwatch(n int) {
	w := t.watches[n]
	if w == nil {
		return
	}
	delete(t.watches, n)
	for _, s := range w.sets {
		delete(t.bySet[s], n)
		if len(t.bySet[s]) == 0 {
			delete(t.bySet, s)
		}
	}
}

// WatchCombos implements polprog.SetIndex.
func (d *Datapath) WatchCombos(sets []uint32, add func(uint32, []uint32) error, remove func(uint32) error) (func(), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.setIdx == nil {
		return nil, errors.New("watch ip set combinations: no index")
	}
	x := d.setIdx
	n, err := x.combos.watch(sets, add, remove)
	if err != nil {
		return nil, err
	}
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		x.combos.unwatch(n)
	}, nil
}
