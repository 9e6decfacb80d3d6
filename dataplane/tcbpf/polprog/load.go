package polprog

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Program is a loaded policy: the head (to put into dpd_jump) and its
// continuation chunks, installed in dpd_chain at indices it owns.
type Program struct {
	rules []RuleInfo
	chain *ebpf.Map
	alloc *chainAlloc
	own   *progMaps // the indexed strategy's maps; nil for a linear program
	// direct: the chunks tail-call the epilogue directly (Maps.Epilogue).
	direct bool

	mu     sync.Mutex
	progs  []*ebpf.Program // chunk i; [0] is the head; guarded by mu
	idx    []uint32        // dpd_chain index of chunk i+1; guarded by mu
	headID ebpf.ProgramID  // kernel id of progs[0], 0 until HeadID looks it up; guarded by mu
	pinDir string          // where Pin put it, "" when unpinned; guarded by mu
	closed bool            // guarded by mu
}

// loadOptions are the verifier options of every chunk; tests raise the log
// level to read the verifier's statistics.
var loadOptions ebpf.ProgramOptions

// counterValue is struct dpd_counter.
type counterValue struct {
	Packets, Bytes uint64
}

// Load loads every chunk (continuations first, so the head never runs into
// an empty chain slot), installs the continuations into m.Chain and creates
// any missing counter entries in m.RuleCtrs. The caller installs Head() into
// dpd_jump and must replace or remove it there before Close.
func (s *Spec) Load(m Maps) (_ *Program, err error) {
	if m.State == nil || m.Jump == nil {
		return nil, errors.New("load policy: state and jump maps are required")
	}
	if len(s.chunks) > 1 && m.Chain == nil {
		return nil, errors.New("load policy: chain map required for a split policy")
	}
	if s.usesIPSets && m.IPSets == nil {
		return nil, errors.New("load policy: ipsets map required")
	}
	if s.usesIPSetIdx && (m.IPSetIdx == nil || m.IPSetIdxHash == nil) {
		return nil, errors.New("load policy: ip set index map required")
	}
	if s.usesCtrs && m.RuleCtrs == nil {
		return nil, errors.New("load policy: rule counter map required")
	}
	p := &Program{rules: s.Rules(), chain: m.Chain, progs: make([]*ebpf.Program, len(s.chunks)), direct: m.Epilogue != nil}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	if n := len(s.chunks) - 1; n > 0 {
		if p.alloc, p.idx, err = takeChain(m.Chain, n); err != nil {
			return nil, fmt.Errorf("load policy: %w", err)
		}
	}
	byName := map[string]*ebpf.Map{
		mapState: m.State, mapJump: m.Jump, mapIPSets: m.IPSets, mapRuleCtrs: m.RuleCtrs, mapChain: m.Chain,
		mapIPSetIdx: m.IPSetIdx, mapIPSetIdxHash: m.IPSetIdxHash,
	}
	if p.own, err = s.newProgMaps(m.SetIndex); err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	p.own.byName(byName)
	if m.Epilogue != nil {
		byName[mapEpilogue] = m.Epilogue
	}
	for c := len(s.chunks) - 1; c >= 0; c-- {
		insns := s.Chunk(c)
		if m.Epilogue != nil {
			directEpilogue(insns)
		}
		for i := range insns {
			ins := &insns[i]
			if ins.IsLoadFromMap() {
				mm := byName[ins.Reference()]
				if mm == nil {
					return nil, fmt.Errorf("load policy chunk %d: no map %s", c, ins.Reference())
				}
				if err := ins.AssociateMap(mm); err != nil {
					return nil, fmt.Errorf("load policy chunk %d: map %s: %w", c, ins.Reference(), err)
				}
			}
			if t, ok := ins.Metadata.Get(chainRef{}).(int); ok {
				ins.Constant = int64(p.idx[t-1])
			}
		}
		prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
			Name:         s.progName(c),
			Type:         ebpf.SchedCLS,
			Instructions: insns,
			License:      "Dual BSD/GPL",
		}, loadOptions)
		if err != nil {
			return nil, fmt.Errorf("load policy chunk %d of %d: %w", c, len(s.chunks), err)
		}
		p.progs[c] = prog
		if c > 0 {
			if err := m.Chain.Update(p.idx[c-1], prog, ebpf.UpdateAny); err != nil {
				return nil, fmt.Errorf("install policy chunk %d at %s[%d]: %w", c, mapChain, p.idx[c-1], err)
			}
		}
	}
	if m.RuleCtrs != nil {
		if err := createCounters(m.RuleCtrs, p.rules); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// progName is a kernel program name (at most 15 characters survive).
func (s *Spec) progName(c int) string {
	d := "e"
	if s.dir == model.Ingress {
		d = "i"
	}
	return fmt.Sprintf("%s_%s%d", s.name, d, c)
}

// createCounters adds a zero entry for every counter id that has none.
// Ids are shared by every program containing the same rule, so entries are
// never deleted here; the map's owner collects unused ones.
func createCounters(m *ebpf.Map, rules []RuleInfo) error {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("create rule counters: %w", err)
	}
	zero := make([]counterValue, ncpu)
	for _, r := range rules {
		err := m.Update(r.CounterID, zero, ebpf.UpdateNoExist)
		if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("create rule counter %x: %w", r.CounterID, err)
		}
	}
	return nil
}

// Head is the program to install at the endpoint's dpd_jump slot.
func (p *Program) Head() *ebpf.Program {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	return p.progs[0]
}

// DirectEpilogue reports whether the program tail-calls the epilogue
// directly (loaded with Maps.Epilogue, or adopted in that form).
func (p *Program) DirectEpilogue() bool { return p.direct }

// Rules returns the counter table in evaluation order.
func (p *Program) Rules() []RuleInfo { return append([]RuleInfo(nil), p.rules...) }

// Close removes the continuation chunks from dpd_chain, frees their
// indices and closes every chunk. Packets still running the program fail
// closed at the next chain tail call. Close is idempotent.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for i, idx := range p.idx {
		if p.progs[i+1] == nil {
			continue // never installed
		}
		if err := p.chain.Delete(idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, fmt.Errorf("delete %s[%d]: %w", mapChain, idx, err))
		}
	}
	if p.alloc != nil {
		p.alloc.release(p.idx)
	}
	for _, prog := range p.progs {
		if prog != nil {
			if err := prog.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	p.own.close() // the kernel keeps them while a program still runs
	return errors.Join(errs...)
}
