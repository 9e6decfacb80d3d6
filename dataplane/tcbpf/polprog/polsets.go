package polprog

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// setWatch keeps a program's mapPolSets current for its SetIndex watch.
// While written is not nil (during adoption) it records the keys it wrote,
// so that entries of combinations gone while no one watched can be told
// from ones written meanwhile; mu orders those writes with the deletions.
type setWatch struct {
	m       *ebpf.Map
	dims    []*setDim
	mu      sync.Mutex
	written map[uint32]bool
}

func (w *setWatch) put(k uint32, bm []uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.m.Update(k, bitsValue(bm), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write %s: %w", mapPolSets, err)
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
			return fmt.Errorf("delete from %s: %w", mapPolSets, err)
		}
		delete(w.written, k)
	}
	return nil
}

// watchSets writes the set dimensions' miss entries into pm.sets and has
// si keep an entry there for every combination holding one of the
// program's sets, until pm is closed. With adopt, entries of combinations
// the index no longer has (left by the previous dpd) are deleted.
func (ix *specIndex) watchSets(pm *progMaps, si SetIndex, adopt bool) error {
	if si == nil {
		return errors.New("the policy classifies by ip sets: a set index is required")
	}
	w := &setWatch{m: pm.sets, dims: ix.sets}
	var before []uint32
	if adopt {
		w.written = map[uint32]bool{}
		var k uint32
		var v []byte
		it := pm.sets.Iterate()
		for it.Next(&k, &v) {
			before = append(before, k)
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("read %s: %w", mapPolSets, err)
		}
	}
	for _, sd := range ix.sets {
		if err := w.put(setKey(0, sd.side), sd.miss); err != nil {
			return err
		}
	}
	stop, err := si.WatchCombos(setIDs(ix.sets), w.add, w.remove)
	if err != nil {
		return fmt.Errorf("watch ip set combinations: %w", err)
	}
	pm.stop = stop
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range before {
		if w.written[k] {
			continue
		}
		if err := w.m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete from %s: %w", mapPolSets, err)
		}
	}
	w.written = nil
	return nil
}
