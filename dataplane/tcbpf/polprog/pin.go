package polprog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// HeadID is the kernel id of the head program (0 once closed). It is
// looked up on first use: reading a program's info costs a third of a
// load, and only restart adoption needs the id.
func (p *Program) HeadID() ebpf.ProgramID {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	if p.headID == 0 && len(p.progs) > 0 && p.progs[0] != nil {
		if info, err := p.progs[0].Info(); err == nil {
			p.headID, _ = info.ID()
		}
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
