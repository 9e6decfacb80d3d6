package polprog

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// specIndex is what Load writes into the per-program maps of the indexed
// strategy.
type specIndex struct {
	words   int
	classes [][]uint64
	entries []clsEntry
	// trie, hash: some dimension is classified in mapCls, in mapClsHash
	// (the code references only those maps).
	trie, hash bool
	// sets are the set dimensions, classified through mapPolSets.
	sets []*setDim
}

// progMaps are maps a Program owns: created by Load, closed by Close.
type progMaps struct {
	cls, clsHash, bits *ebpf.Map
	sets               *ebpf.Map // mapPolSets, the slot of setw's hash
	setw               *setWatch // keeps the hash current as combinations come and go
	stop               func()    // ends the SetIndex watch
}

// all is every map pm has.
func (pm *progMaps) all() []*ebpf.Map {
	var out []*ebpf.Map
	for _, m := range []*ebpf.Map{pm.cls, pm.clsHash, pm.bits, pm.sets} {
		if m != nil {
			out = append(out, m)
		}
	}
	return out
}

// split returns the trie's and the exact-match table's entries.
func (ix *specIndex) split() (trie, exact map[[clsKeySize]byte]uint32) {
	trie, exact = map[[clsKeySize]byte]uint32{}, map[[clsKeySize]byte]uint32{}
	for _, e := range ix.entries {
		if e.exact {
			exact[e.key] = e.class
		} else {
			trie[e.key] = e.class
		}
	}
	return trie, exact
}

// newProgMaps creates and fills the per-program maps of s (none for a
// linear program). They are frozen: nothing changes them after Load, but
// for mapPolSets, which the SetIndex watch keeps current.
func (s *Spec) newProgMaps(si SetIndex) (_ *progMaps, err error) {
	ix := s.index
	if ix == nil {
		return nil, nil
	}
	pm := &progMaps{}
	defer func() {
		if err != nil {
			pm.close()
		}
	}()
	trie, exact := ix.split()
	if ix.trie {
		pm.cls, err = ebpf.NewMap(&ebpf.MapSpec{
			Name: mapCls, Type: ebpf.LPMTrie, KeySize: clsKeySize, ValueSize: 4,
			MaxEntries: uint32(max(1, len(trie))), Flags: unix.BPF_F_NO_PREALLOC,
		})
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", mapCls, err)
		}
	}
	if ix.hash {
		pm.clsHash, err = ebpf.NewMap(&ebpf.MapSpec{
			Name: mapClsHash, Type: ebpf.Hash, KeySize: clsKeySize, ValueSize: 4,
			MaxEntries: uint32(max(1, len(exact))),
		})
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", mapClsHash, err)
		}
	}
	for _, e := range ix.entries {
		m, name := pm.cls, mapCls
		if e.exact {
			m, name = pm.clsHash, mapClsHash
		}
		if err := m.Update(e.key[:], e.class, ebpf.UpdateNoExist); err != nil {
			return nil, fmt.Errorf("fill %s: %w", name, err)
		}
	}
	if len(ix.classes) > 0 { // none when only sets are classified
		pm.bits, err = ebpf.NewMap(&ebpf.MapSpec{
			Name: mapBits, Type: ebpf.Array, KeySize: 4, ValueSize: uint32(8 * (ix.words + 1)),
			MaxEntries: uint32(len(ix.classes)),
		})
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", mapBits, err)
		}
		for id, bm := range ix.classes {
			if err := pm.bits.Update(uint32(id), bitsValue(bm), ebpf.UpdateAny); err != nil {
				return nil, fmt.Errorf("fill %s: %w", mapBits, err)
			}
		}
	}
	for _, m := range []*ebpf.Map{pm.cls, pm.clsHash, pm.bits} {
		if m == nil {
			continue
		}
		if err := m.Freeze(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("freeze %s: %w", m, err)
		}
	}
	if len(ix.sets) > 0 {
		if pm.setw, err = newSetMaps(ix.words); err != nil {
			return nil, err
		}
		pm.sets = pm.setw.outer
		if pm.stop, err = pm.setw.watch(ix, si, false); err != nil {
			return nil, err
		}
	}
	return pm, nil
}

// bitsValue is a class's dpd_pol_bits value: the bitmap words, then the
// index of its first non-zero word (len(bm) when it is all zero), which
// lets the head jump past the words no candidate can be in.
func bitsValue(bm []uint64) []uint64 {
	first := len(bm)
	for w, x := range bm {
		if x != 0 {
			first = w
			break
		}
	}
	return append(slices.Clone(bm), uint64(first))
}

// byName adds the maps to a reference table.
func (pm *progMaps) byName(m map[string]*ebpf.Map) {
	if pm != nil {
		m[mapCls], m[mapClsHash], m[mapBits], m[mapPolSets] = pm.cls, pm.clsHash, pm.bits, pm.sets
	}
}

func (pm *progMaps) close() {
	if pm == nil {
		return
	}
	if pm.stop != nil {
		pm.stop()
	}
	if pm.setw != nil {
		pm.setw.close()
	}
	for _, m := range pm.all() {
		_ = m.Close()
	}
}
