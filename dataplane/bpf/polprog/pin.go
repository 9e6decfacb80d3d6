package polprog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// A program pinned by Pin is one directory holding one pin per chunk. The
// names carry what a later process needs to adopt it (bpffs holds no
// regular files): the head is "head-of-<chunks>", continuation i is
// "chunk-<i>-at-<dpd_chain index>". The head is pinned last, so a
// directory without it is an interrupted pin.
const (
	pinHeadPrefix  = "head-of-"
	pinChunkPrefix = "chunk-"
	pinChunkAt     = "-at-"
)

// Pin pins every chunk under dir (created if needed), head last. A program
// pinned elsewhere is moved: its old pins are removed first.
func (p *Program) Pin(dir string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("pin policy: program closed")
	}
	if p.pinDir == dir {
		return nil
	}
	if p.pinDir != "" {
		if err := unpinDir(p.pinDir); err != nil {
			return err
		}
		p.pinDir = ""
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pin policy: %w", err)
	}
	for c := len(p.progs) - 1; c >= 0; c-- {
		name := pinHeadPrefix + strconv.Itoa(len(p.progs))
		if c > 0 {
			name = pinChunkPrefix + strconv.Itoa(c) + pinChunkAt + strconv.FormatUint(uint64(p.idx[c-1]), 10)
		}
		path := filepath.Join(dir, name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pin policy: replace %s: %w", path, err)
		}
		if err := p.progs[c].Pin(path); err != nil {
			return fmt.Errorf("pin policy chunk %d: %w", c, err)
		}
	}
	p.pinDir = dir
	return nil
}

// Unpin removes the program's pins; the loaded program is unaffected.
func (p *Program) Unpin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pinDir == "" {
		return nil
	}
	err := unpinDir(p.pinDir)
	if err == nil {
		p.pinDir = ""
	}
	return err
}

// PinDir is where the program is pinned ("" when it is not).
func (p *Program) PinDir() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pinDir
}

// HeadID is the kernel id of the head program (0 once closed).
func (p *Program) HeadID() ebpf.ProgramID {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	return p.headID
}

// ChainIndices are the dpd_chain indices the continuations occupy.
func (p *Program) ChainIndices() []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint32(nil), p.idx...)
}

// Abandon closes the program's descriptors and nothing else: dpd_chain and
// the pins stay, so the next process adopts the program while the kernel
// keeps running it. Use it when dpd stops; Close when a program goes.
func (p *Program) Abandon() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	if p.alloc != nil {
		p.alloc.release(p.idx)
	}
	for _, prog := range p.progs {
		if prog != nil {
			_ = prog.Close()
		}
	}
	p.own.close()
}

// unpinDir removes every pin in dir, then dir.
func unpinDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("unpin policy %s: %w", dir, err)
	}
	return nil
}

// Pinned is a policy program an earlier process pinned, opened but not yet
// verified. Its chain indices are reserved in the allocator so that no new
// program takes them while it may still be adopted.
type Pinned struct {
	Dir   string
	progs []*ebpf.Program
	ids   []ebpf.ProgramID
	idx   []uint32
	chain *ebpf.Map
	alloc *chainAlloc
}

// OpenPinned opens the program pinned in dir and reserves its chain
// indices of chain. An incomplete directory, or indices another program
// holds, is an error: the caller treats it as garbage.
func OpenPinned(dir string, chain *ebpf.Map) (_ *Pinned, err error) {
	n, idxByChunk, err := readPinNames(dir)
	if err != nil {
		return nil, err
	}
	p := &Pinned{Dir: dir, chain: chain, progs: make([]*ebpf.Program, n), ids: make([]ebpf.ProgramID, n)}
	defer func() {
		if err != nil {
			p.closeProgs()
		}
	}()
	for c := range n {
		name := pinHeadPrefix + strconv.Itoa(n)
		if c > 0 {
			name = pinChunkPrefix + strconv.Itoa(c) + pinChunkAt + strconv.FormatUint(uint64(idxByChunk[c]), 10)
			p.idx = append(p.idx, idxByChunk[c])
		}
		prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, name), nil)
		if err != nil {
			return nil, fmt.Errorf("open pinned policy %s: %w", name, err)
		}
		p.progs[c] = prog
		info, err := prog.Info()
		if err != nil {
			return nil, fmt.Errorf("pinned policy %s: %w", name, err)
		}
		p.ids[c], _ = info.ID()
	}
	if len(p.idx) > 0 {
		if chain == nil {
			return nil, errors.New("open pinned policy: chain map required for a split policy")
		}
		if p.alloc, err = reserveChain(chain, p.idx); err != nil {
			return nil, fmt.Errorf("open pinned policy %s: %w", dir, err)
		}
	}
	return p, nil
}

// readPinNames parses a pin directory: the chunk count and each
// continuation's chain index.
func readPinNames(dir string) (int, map[int]uint32, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, fmt.Errorf("read pinned policy: %w", err)
	}
	n := 0
	idx := map[int]uint32{}
	for _, e := range ents {
		name := e.Name()
		if rest, ok := strings.CutPrefix(name, pinHeadPrefix); ok {
			v, err := strconv.Atoi(rest)
			if err != nil || v < 1 || n != 0 {
				return 0, nil, fmt.Errorf("pinned policy %s: bad head %q", dir, name)
			}
			n = v
			continue
		}
		rest, ok := strings.CutPrefix(name, pinChunkPrefix)
		if !ok {
			return 0, nil, fmt.Errorf("pinned policy %s: unexpected %q", dir, name)
		}
		cs, is, ok := strings.Cut(rest, pinChunkAt)
		c, err1 := strconv.Atoi(cs)
		i, err2 := strconv.ParseUint(is, 10, 32)
		if !ok || err1 != nil || err2 != nil || c < 1 {
			return 0, nil, fmt.Errorf("pinned policy %s: bad chunk %q", dir, name)
		}
		if _, dup := idx[c]; dup {
			return 0, nil, fmt.Errorf("pinned policy %s: chunk %d pinned twice", dir, c)
		}
		idx[c] = uint32(i)
	}
	if n == 0 {
		return 0, nil, fmt.Errorf("pinned policy %s: no head (interrupted pin)", dir)
	}
	if len(idx) != n-1 {
		return 0, nil, fmt.Errorf("pinned policy %s: %d continuations for %d chunks", dir, len(idx), n)
	}
	for c := 1; c < n; c++ {
		if _, ok := idx[c]; !ok {
			return 0, nil, fmt.Errorf("pinned policy %s: chunk %d missing", dir, c)
		}
	}
	return n, idx, nil
}

// HeadID is the kernel id of the pinned head.
func (p *Pinned) HeadID() ebpf.ProgramID {
	if len(p.ids) == 0 {
		return 0
	}
	return p.ids[0]
}

// Release gives up a pinned program nobody adopted: its continuations are
// removed from dpd_chain (only where they are still installed), its indices
// freed and its descriptors closed; with unpin, its pins go too. The kernel
// frees the programs once no dpd_jump slot holds the head.
func (p *Pinned) Release(unpin bool) error {
	var errs []error
	for i, idx := range p.idx {
		if p.chain == nil || i+1 >= len(p.ids) {
			break
		}
		var id uint32
		err := p.chain.Lookup(idx, &id)
		if err == nil && ebpf.ProgramID(id) == p.ids[i+1] {
			if err := p.chain.Delete(idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("delete %s[%d]: %w", mapChain, idx, err))
			}
		}
	}
	if p.alloc != nil {
		p.alloc.release(p.idx)
		p.alloc = nil
	}
	p.closeProgs()
	if unpin && p.Dir != "" {
		errs = append(errs, unpinDir(p.Dir))
	}
	return errors.Join(errs...)
}

// Abandon closes the descriptors and frees the reservation, leaving the
// kernel and the pins as they are (for a reopen or a restart).
func (p *Pinned) Abandon() {
	if p.alloc != nil {
		p.alloc.release(p.idx)
		p.alloc = nil
	}
	p.closeProgs()
}

// Unpin removes the pins, keeping the descriptors and the reservation: a
// new program for the same policy takes the pin path while this one may
// still run.
func (p *Pinned) Unpin() error {
	if p.Dir == "" {
		return nil
	}
	err := unpinDir(p.Dir)
	if err == nil {
		p.Dir = ""
	}
	return err
}

func (p *Pinned) closeProgs() {
	for _, prog := range p.progs {
		if prog != nil {
			_ = prog.Close()
		}
	}
	p.progs = nil
}

// Adopt takes over a pinned program as the loaded form of s, provided it
// is exactly what Load would produce now: every chunk has the tag of s's
// instructions (with the pinned chain indices) and uses only maps of m. A
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
	for _, mm := range []*ebpf.Map{m.State, m.Jump, m.IPSets, m.RuleCtrs, m.Chain, m.IPSetIdx} {
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
	for c := range s.chunks {
		if err := s.matchChunk(c, p.progs[c], p.idx, allowed); err != nil {
			own.close()
			return nil, fmt.Errorf("adopt policy chunk %d: %w", c, err)
		}
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
	rules := s.Rules()
	if m.RuleCtrs != nil {
		if err := createCounters(m.RuleCtrs, rules); err != nil {
			own.close()
			return nil, err
		}
	}
	prog := &Program{
		rules: rules, chain: m.Chain, alloc: p.alloc, own: own,
		progs: p.progs, idx: p.idx, headID: p.ids[0], pinDir: p.Dir,
	}
	*p = Pinned{}
	return prog, nil
}

// adoptOwnMaps finds the per-program maps the pinned chunks use besides
// the shared ones (allowed) and checks they hold exactly what Load would
// fill them with for s; it returns them opened (nil when s has none). The
// maps are frozen at load, so equal contents now mean equal for good.
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
		case info.Name == mapBits && pm.bits == nil:
			pm.bits = mm
		default:
			_ = mm.Close()
			return nil, fmt.Errorf("pinned program uses unexpected map %q (%d)", info.Name, id)
		}
	}
	if pm.cls == nil || pm.bits == nil {
		return nil, errors.New("pinned program lacks a classification map")
	}
	if err := s.index.matchMaps(pm); err != nil {
		return nil, err
	}
	return pm, nil
}

// matchMaps compares the per-program maps with what Load writes.
func (ix *specIndex) matchMaps(pm *progMaps) error {
	want := make(map[[clsKeySize]byte]uint32, len(ix.entries))
	for _, e := range ix.entries {
		want[e.key] = e.class
	}
	var k [clsKeySize]byte
	var v uint32
	n := 0
	it := pm.cls.Iterate()
	for it.Next(&k, &v) {
		if c, ok := want[k]; !ok || c != v {
			return fmt.Errorf("%s differs at key %x", mapCls, k)
		}
		n++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", mapCls, err)
	}
	if n != len(want) {
		return fmt.Errorf("%s has %d entries, want %d", mapCls, n, len(want))
	}
	if int(pm.bits.MaxEntries()) != len(ix.classes) || int(pm.bits.ValueSize()) != 8*ix.words {
		return fmt.Errorf("%s has another shape", mapBits)
	}
	got := make([]uint64, ix.words)
	for id, bm := range ix.classes {
		if err := pm.bits.Lookup(uint32(id), got); err != nil {
			return fmt.Errorf("read %s[%d]: %w", mapBits, id, err)
		}
		if !slices.Equal(got, bm) {
			return fmt.Errorf("%s differs at class %d", mapBits, id)
		}
	}
	return nil
}

// ownIDs adds the ids of the per-program maps to ids.
func ownIDs(pm *progMaps, ids map[ebpf.MapID]bool) {
	for _, m := range []*ebpf.Map{pm.cls, pm.bits} {
		if info, err := m.Info(); err == nil {
			if id, ok := info.ID(); ok {
				ids[id] = true
			}
		}
	}
}

// matchChunk checks that prog is chunk c of s as Load would build it with
// the chain indices idx, using only allowed maps.
func (s *Spec) matchChunk(c int, prog *ebpf.Program, idx []uint32, allowed map[ebpf.MapID]bool) error {
	info, err := prog.Info()
	if err != nil {
		return fmt.Errorf("program info: %w", err)
	}
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
