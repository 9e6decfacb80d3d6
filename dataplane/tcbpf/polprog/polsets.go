package polprog

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// dpd_pol_sets is an ARRAY_OF_MAPS of one slot holding the hash the set
// dimensions read (mapPolSetsInner): a hash's bucket array is allocated
// for its maximum size up front, so it starts small and, when full, is
// replaced by one twice the size, which the program then reads through
// the same slot, without a reload.
const (
	mapPolSetsInner = "dpd_pol_setsi"
	setsInitial     = 256 // entries of a program's first hash
)

// setWatch keeps a program's set hash current for its SetIndex watch.
// While written is not nil (during adoption) it records the keys it wrote,
// so that entries of combinations gone while no one watched can be told
// from ones written meanwhile. mu orders every write, deletion and growth.
type setWatch struct {
	outer   *ebpf.Map
	dims    []*setDim
	words   int
	mu      sync.Mutex
	m       *ebpf.Map // the hash in outer's slot; guarded by mu
	written map[uint32]bool
}

func setsInnerSpec(words int, entries uint32) *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: mapPolSetsInner, Type: ebpf.Hash, KeySize: 4, ValueSize: uint32(8 * (words + 1)),
		MaxEntries: entries, Flags: unix.BPF_F_NO_PREALLOC}
}

// newSetMaps creates dpd_pol_sets with its first hash.
func newSetMaps(words int) (*setWatch, error) {
	inner, err := ebpf.NewMap(setsInnerSpec(words, setsInitial))
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", mapPolSetsInner, err)
	}
	outer, err := ebpf.NewMap(&ebpf.MapSpec{Name: mapPolSets, Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4,
		MaxEntries: 1, InnerMap: setsInnerSpec(words, setsInitial)})
	if err != nil {
		_ = inner.Close()
		return nil, fmt.Errorf("create %s: %w", mapPolSets, err)
	}
	if err := outer.Update(uint32(0), inner, ebpf.UpdateAny); err != nil {
		_ = inner.Close()
		_ = outer.Close()
		return nil, fmt.Errorf("fill %s: %w", mapPolSets, err)
	}
	return &setWatch{outer: outer, m: inner, words: words}, nil
}

// grow replaces the full hash with one twice its size holding the same
// entries (mu held: nothing writes meanwhile).
func (w *setWatch) grow() error {
	size := 2 * w.m.MaxEntries()
	if size > maxCombos {
		return fmt.Errorf("%s: more than %d combinations", mapPolSetsInner, maxCombos)
	}
	nm, err := ebpf.NewMap(setsInnerSpec(w.words, size))
	if err != nil {
		return fmt.Errorf("grow %s: %w", mapPolSetsInner, err)
	}
	var k uint32
	v := make([]byte, w.m.ValueSize())
	it := w.m.Iterate()
	for it.Next(&k, &v) {
		if err := nm.Update(k, v, ebpf.UpdateAny); err != nil {
			_ = nm.Close()
			return fmt.Errorf("grow %s: %w", mapPolSetsInner, err)
		}
	}
	if err := it.Err(); err != nil {
		_ = nm.Close()
		return fmt.Errorf("grow %s: read: %w", mapPolSetsInner, err)
	}
	if err := w.outer.Update(uint32(0), nm, ebpf.UpdateAny); err != nil {
		_ = nm.Close()
		return fmt.Errorf("grow %s: swap: %w", mapPolSetsInner, err)
	}
	_ = w.m.Close() // packets still reading it hold it until they finish
	w.m = nm
	return nil
}

func (w *setWatch) put(k uint32, bm []uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := bitsValue(bm)
	err := w.m.Update(k, v, ebpf.UpdateAny)
	if errors.Is(err, unix.E2BIG) { // full
		if err = w.grow(); err == nil {
			err = w.m.Update(k, v, ebpf.UpdateAny)
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", mapPolSetsInner, err)
	}
	if w.written != nil {
		w.written[k] = true
	}
	return nil
}

func (w *setWatch) add(id uint32, sets []uint32) error {
	for _, sd := range w.dims {
		if bm, ok := sd.bitmap(sets); ok {
			if err := w.put(setKey(id, sd.side), bm); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *setWatch) remove(id uint32) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, sd := range w.dims {
		k := setKey(id, sd.side)
		if err := w.m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete from %s: %w", mapPolSetsInner, err)
		}
		delete(w.written, k)
	}
	return nil
}

// inner is the hash the program reads now.
func (w *setWatch) inner() *ebpf.Map {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m
}

// close closes the hash (the outer map is one of progMaps').
func (w *setWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.m.Close()
}

// watch writes the set dimensions' miss entries and has si keep an entry
// for every combination holding one of the program's sets, until stopped.
// With adopt, entries of combinations the index no longer has (left by the
// previous dpd) are deleted.
func (w *setWatch) watch(ix *specIndex, si SetIndex, adopt bool) (stop func(), err error) {
	if si == nil {
		return nil, errors.New("the policy classifies by ip sets: a set index is required")
	}
	w.dims = ix.sets
	var before []uint32
	if adopt {
		w.written = map[uint32]bool{}
		var k uint32
		var v []byte
		it := w.inner().Iterate()
		for it.Next(&k, &v) {
			before = append(before, k)
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", mapPolSetsInner, err)
		}
	}
	for _, sd := range ix.sets {
		if err := w.put(setKey(0, sd.side), sd.miss); err != nil {
			return nil, err
		}
	}
	stop, err = si.WatchCombos(setIDs(ix.sets), w.add, w.remove)
	if err != nil {
		return nil, fmt.Errorf("watch ip set combinations: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range before {
		if w.written[k] {
			continue
		}
		if err := w.m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			stop()
			return nil, fmt.Errorf("delete from %s: %w", mapPolSetsInner, err)
		}
	}
	w.written = nil
	return stop, nil
}

// adoptSetWatch opens the hash in a pinned program's dpd_pol_sets.
func adoptSetWatch(outer *ebpf.Map, words int) (*setWatch, error) {
	var id uint32
	if err := outer.Lookup(uint32(0), &id); err != nil {
		return nil, fmt.Errorf("read %s: %w", mapPolSets, err)
	}
	inner, err := ebpf.NewMapFromID(ebpf.MapID(id))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", mapPolSetsInner, err)
	}
	if int(inner.ValueSize()) != 8*(words+1) || inner.KeySize() != 4 {
		_ = inner.Close()
		return nil, fmt.Errorf("%s has another shape", mapPolSetsInner)
	}
	return &setWatch{outer: outer, m: inner, words: words}, nil
}
