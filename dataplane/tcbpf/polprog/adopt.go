package polprog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cilium/ebpf"
)

// Adoption: a restarted dpd finds its policy programs pinned (pin.go) and
// takes them over only if they are exactly what the policy compiles to now,
// so an unchanged policy costs no load and no dpd_jump write.

// Adopt takes over a pinned program as the loaded form of s, provided it
// is exactly what Load would produce now: every chunk has the tag of s's
// instructions (with the pinned chain indices, and either epilogue call
// where m has epilogue arrays, else the indirect one) and uses only maps
// of m (any of m.Epilogues included). A
// continuation missing from dpd_chain is reinstalled. On success p is
// consumed (its descriptors, pins and reservation now belong to the
// Program); on error p is left as it was.
func (s *Spec) Adopt(m Maps, p *Pinned) (*Program, error) {
	if len(p.progs) != len(s.chunks) {
		return nil, fmt.Errorf("adopt policy: %d pinned chunks, compiled %d", len(p.progs), len(s.chunks))
	}
	if len(s.chunks) > 1 && m.Chain == nil {
		return nil, errors.New("adopt policy: chain map required for a split policy")
	}
	allowed := map[ebpf.MapID]bool{}
	shared := []*ebpf.Map{m.State, m.Jump, m.IPSets, m.RuleCtrs, m.Chain, m.IPSetIdx, m.IPSetIdxHash, m.Epilogue}
	for _, mm := range append(shared, m.Epilogues...) {
		if mm == nil {
			continue
		}
		info, err := mm.Info()
		if err != nil {
			return nil, fmt.Errorf("adopt policy: map info: %w", err)
		}
		if id, ok := info.ID(); ok {
			allowed[id] = true
		}
	}
	own, err := s.adoptOwnMaps(p.progs, allowed)
	if err != nil {
		return nil, fmt.Errorf("adopt policy: %w", err)
	}
	if own != nil {
		ownIDs(own, allowed)
	}
	// Either epilogue call is right (the epilogue arrays and dpd_jump hold
	// the same epilogue): a program loaded indirectly and not yet reloaded
	// with the direct call is adopted as it is.
	canDirect := m.Epilogue != nil || len(m.Epilogues) > 0
	direct := canDirect
	for c := range s.chunks {
		d, err := s.matchEither(c, p.progs[c], p.idx, allowed, canDirect)
		if err != nil {
			own.close()
			return nil, fmt.Errorf("adopt policy chunk %d: %w", c, err)
		}
		direct = direct && d
	}
	for i, idx := range p.idx {
		var id uint32
		if err := m.Chain.Lookup(idx, &id); err == nil && ebpf.ProgramID(id) == p.ids[i+1] {
			continue
		}
		if err := m.Chain.Update(idx, p.progs[i+1], ebpf.UpdateAny); err != nil {
			own.close()
			return nil, fmt.Errorf("adopt policy: reinstall chunk %d at %s[%d]: %w", i+1, mapChain, idx, err)
		}
	}
	if own != nil && own.setw != nil {
		// Rewrites the hash from the current combinations of the policy's
		// sets; a pinned program of another policy was refused above.
		if own.stop, err = own.setw.watch(s.index, m.SetIndex, true); err != nil {
			own.close()
			return nil, fmt.Errorf("adopt policy: %w", err)
		}
	}
	rules := s.Rules()
	if m.RuleCtrs != nil {
		if err := createCounters(m.RuleCtrs, rules); err != nil {
			own.close()
			return nil, err
		}
	}
	prog := &Program{
		rules: rules, chain: m.Chain, alloc: p.alloc, own: own,
		progs: p.progs, idx: p.idx, headID: p.ids[0], pinDir: p.Dir, direct: direct,
	}
	*p = Pinned{}
	return prog, nil
}

// adoptOwnMaps finds the per-program maps the pinned chunks use besides
// the shared ones (allowed) and checks they hold exactly what Load would
// fill them with for s; it returns them opened (nil when s has none). The
// maps are frozen at load, so equal contents now mean equal for good; the
// set dimensions' hash is opened, to be watched once the program is.
func (s *Spec) adoptOwnMaps(progs []*ebpf.Program, allowed map[ebpf.MapID]bool) (_ *progMaps, err error) {
	extra := map[ebpf.MapID]bool{}
	for _, prog := range progs {
		info, err := prog.Info()
		if err != nil {
			return nil, fmt.Errorf("program info: %w", err)
		}
		ids, _ := info.MapIDs()
		for _, id := range ids {
			if !allowed[id] {
				extra[id] = true
			}
		}
	}
	if len(extra) == 0 {
		if s.index != nil {
			return nil, errors.New("pinned program has no classification maps, the policy needs them")
		}
		return nil, nil
	}
	if s.index == nil {
		return nil, fmt.Errorf("pinned program uses %d maps the policy does not need", len(extra))
	}
	pm := &progMaps{}
	defer func() {
		if err != nil {
			pm.close()
		}
	}()
	for id := range extra {
		mm, err := ebpf.NewMapFromID(id)
		if err != nil {
			return nil, fmt.Errorf("open map %d: %w", id, err)
		}
		info, err := mm.Info()
		if err != nil {
			_ = mm.Close()
			return nil, fmt.Errorf("map %d info: %w", id, err)
		}
		switch {
		case info.Name == mapCls && pm.cls == nil:
			pm.cls = mm
		case info.Name == mapClsHash && pm.clsHash == nil:
			pm.clsHash = mm
		case info.Name == mapBits && pm.bits == nil:
			pm.bits = mm
		case info.Name == mapPolSets && pm.sets == nil:
			pm.sets = mm
		default:
			_ = mm.Close()
			return nil, fmt.Errorf("pinned program uses unexpected map %q (%d)", info.Name, id)
		}
	}
	if (pm.cls == nil) == s.index.trie || (pm.clsHash == nil) == s.index.hash || (pm.bits == nil) == (len(s.index.classes) > 0) ||
		(pm.sets == nil) == (len(s.index.sets) > 0) {
		return nil, errors.New("pinned program's classification maps differ from the policy's")
	}
	if err := s.index.matchMaps(pm); err != nil {
		return nil, err
	}
	if pm.sets != nil {
		// Watched (and so rewritten) only once the chunks match.
		if pm.setw, err = adoptSetWatch(pm.sets, s.index.words); err != nil {
			return nil, err
		}
	}
	return pm, nil
}

// matchMaps compares the per-program maps with what Load writes.
func (ix *specIndex) matchMaps(pm *progMaps) error {
	trie, exact := ix.split()
	if pm.cls != nil {
		if err := matchCls(pm.cls, mapCls, trie); err != nil {
			return err
		}
	}
	if pm.clsHash != nil {
		if err := matchCls(pm.clsHash, mapClsHash, exact); err != nil {
			return err
		}
	}
	if pm.bits == nil {
		return nil
	}
	if int(pm.bits.MaxEntries()) != len(ix.classes) || int(pm.bits.ValueSize()) != 8*(ix.words+1) {
		return fmt.Errorf("%s has another shape", mapBits)
	}
	got := make([]uint64, ix.words+1)
	for id, bm := range ix.classes {
		if err := pm.bits.Lookup(uint32(id), got); err != nil {
			return fmt.Errorf("read %s[%d]: %w", mapBits, id, err)
		}
		if !slices.Equal(got, bitsValue(bm)) {
			return fmt.Errorf("%s differs at class %d", mapBits, id)
		}
	}
	return nil
}

// matchCls compares a classification map with its entries.
func matchCls(m *ebpf.Map, name string, want map[[clsKeySize]byte]uint32) error {
	var k [clsKeySize]byte
	var v uint32
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		if c, ok := want[k]; !ok || c != v {
			return fmt.Errorf("%s differs at key %x", name, k)
		}
		n++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if n != len(want) {
		return fmt.Errorf("%s has %d entries, want %d", name, n, len(want))
	}
	return nil
}

// ownIDs adds the ids of the per-program maps to ids.
func ownIDs(pm *progMaps, ids map[ebpf.MapID]bool) {
	for _, m := range pm.all() {
		if info, err := m.Info(); err == nil {
			if id, ok := info.ID(); ok {
				ids[id] = true
			}
		}
	}
}

// matchEither matches chunk c with the direct epilogue call (when
// canDirect), else with the indirect one, and reports which matched.
func (s *Spec) matchEither(c int, prog *ebpf.Program, idx []uint32, allowed map[ebpf.MapID]bool, canDirect bool) (direct bool, err error) {
	info, err := prog.Info()
	if err != nil {
		return false, fmt.Errorf("program info: %w", err)
	}
	if canDirect && s.matchChunk(c, info, idx, allowed, true) == nil {
		return true, nil
	}
	return false, s.matchChunk(c, info, idx, allowed, false)
}

// matchChunk checks that prog is chunk c of s as Load would build it with
// the chain indices idx (and a direct epilogue call when direct), using
// only allowed maps.
func (s *Spec) matchChunk(c int, info *ebpf.ProgramInfo, idx []uint32, allowed map[ebpf.MapID]bool, direct bool) error {
	ids, ok := info.MapIDs()
	if !ok {
		return errors.New("kernel does not report program maps")
	}
	for _, id := range ids {
		if !allowed[id] {
			return fmt.Errorf("uses map %d, which is not one of the current maps", id)
		}
	}
	insns := s.Chunk(c)
	if direct {
		directEpilogue(insns)
	}
	for i := range insns {
		if t, ok := insns[i].Metadata.Get(chainRef{}).(int); ok {
			if t-1 >= len(idx) {
				return fmt.Errorf("chain reference to chunk %d of %d", t, len(idx)+1)
			}
			insns[i].Constant = int64(idx[t-1])
		}
	}
	// Resolve jump labels to offsets, as loading does, before hashing.
	if err := insns.Marshal(io.Discard, nativeOrder()); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	match, err := insns.HasTag(info.Tag, nativeOrder())
	if err != nil {
		return fmt.Errorf("tag: %w", err)
	}
	if !match {
		return fmt.Errorf("instructions differ (tag %s)", info.Tag)
	}
	return nil
}

// ChainIndexInUse reports whether a program (loaded or pinned and
// reserved) of this process owns index idx of chain: garbage collection
// removes the dpd_chain entries no one owns.
func ChainIndexInUse(chain *ebpf.Map, idx uint32) bool {
	chainAllocs.mu.Lock()
	defer chainAllocs.mu.Unlock()
	a := chainAllocs.byKey[chainKey(chain)]
	return a != nil && idx < a.size && a.used[idx]
}

// nativeOrder is the host byte order as one of the two concrete orders,
// which is all the asm encoder accepts.
func nativeOrder() binary.ByteOrder {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return binary.LittleEndian
	}
	return binary.BigEndian
}
