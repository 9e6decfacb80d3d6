package linux

import (
	"fmt"
	"maps"
	"path"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// The fake kernel's policy programs, counters, IP sets and sweeps
// (programFacility, sweepFacility, ipsetMaps).

// --- programFacility

// fakeProg is a loaded policy program, or one an earlier dpd pinned.
type fakeProg struct {
	f    *fakeKernel
	id   ebpf.ProgramID
	name string
	pin  string // pin directory; "" when unpinned
	held bool   // this process holds it (loaded or adopted)
	// direct: loaded by LoadDirect.
	direct bool
}

func (f *fakeKernel) newProg(name string) *fakeProg {
	f.nextProg++
	p := &fakeProg{f: f, id: f.nextProg, name: name}
	f.progs[p.id] = p
	return p
}

// pinProg leaves a program as an earlier dpd would: pinned, installed
// nowhere yet, held by nobody.
func (f *fakeKernel) pinProg(dir model.Direction, policy string) *fakeProg {
	pol := f.policy(policy)
	key := progKey{hash: pol.Hash(), dir: dir}
	p := f.newProg(dir.String() + ":" + policy)
	p.pin = path.Join(fakeProgsDir, key.pinName())
	f.pins[p.pin] = p.id
	return p
}

func (f *fakeKernel) Load(pol *model.DirectionPolicy, dir model.Direction) (loadedProgram, error) {
	if f.loadHook != nil {
		f.loadHook(pol)
	}
	return f.load("Load", pol, dir)
}

func (f *fakeKernel) DirectEpilogue() bool { return f.direct }

func (f *fakeKernel) LoadDirect(pol *model.DirectionPolicy, dir model.Direction) (loadedProgram, error) {
	if !f.direct {
		return nil, fmt.Errorf("LoadDirect without a direct epilogue")
	}
	if f.loadDirectHook != nil {
		f.loadDirectHook()
	}
	p, err := f.load("LoadDirect", pol, dir)
	if err != nil {
		return nil, err
	}
	p.direct = true
	return p, nil
}

func (f *fakeKernel) load(op string, pol *model.DirectionPolicy, dir model.Direction) (*fakeProg, error) {
	f.loadMu.Lock()
	defer f.loadMu.Unlock()
	name, ok := f.names[pol.Hash()]
	if !ok {
		name = "unnamed"
	}
	if err := f.op(op, "%s:%s", dir, name); err != nil {
		return nil, err
	}
	p := f.newProg(dir.String() + ":" + name)
	p.held = true
	return p, nil
}

func (f *fakeKernel) Adopt(pol *model.DirectionPolicy, dir model.Direction, pp pinnedProgram) (loadedProgram, error) {
	p := pp.(*fakeProg)
	if err := f.read("Adopt"); err != nil {
		return nil, err
	}
	p.held = true
	return p, nil
}

func (f *fakeKernel) ProgsDir() string { return fakeProgsDir }

func (f *fakeKernel) PinnedNames() ([]string, error) {
	if err := f.read("PinnedNames"); err != nil {
		return nil, err
	}
	var out []string
	for d := range f.pins {
		out = append(out, path.Base(d))
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeKernel) OpenPinned(name string) (pinnedProgram, error) {
	d := path.Join(fakeProgsDir, name)
	p := f.progs[f.pins[d]]
	if p == nil || p.pin != d {
		return nil, fmt.Errorf("open %s: incomplete", name)
	}
	return p, nil
}

func (f *fakeKernel) RemovePinDir(dir string) error {
	if err := f.op("RemovePinDir", "%s", path.Base(dir)); err != nil {
		return err
	}
	delete(f.pins, dir)
	return nil
}

func (f *fakeKernel) ChainIndices() ([]uint32, error) {
	if err := f.read("ChainIndices"); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(f.chain)), nil
}

func (f *fakeKernel) ChainIndexInUse(uint32) bool { return false }

func (f *fakeKernel) DeleteChainIndex(idx uint32) error {
	if err := f.op("DeleteChainIndex", "%d", idx); err != nil {
		return err
	}
	delete(f.chain, idx)
	return nil
}

func (f *fakeKernel) CounterIDs() ([]uint64, error) {
	if err := f.read("CounterIDs"); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(f.counters)), nil
}

func (f *fakeKernel) EnsureCounters(ids []uint64) error {
	f.loadMu.Lock()
	defer f.loadMu.Unlock()
	for _, id := range ids {
		f.counters[id] = true
	}
	return nil
}

func (f *fakeKernel) DeleteCounters(ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	if err := f.op("DeleteCounters", "%v", ids); err != nil {
		return err
	}
	for _, id := range ids {
		delete(f.counters, id)
	}
	return nil
}

// fakeProg as loadedProgram and pinnedProgram.

func (p *fakeProg) Head() *ebpf.Program       { return nil }
func (p *fakeProg) Rules() []polprog.RuleInfo { return nil }
func (p *fakeProg) PinDir() string            { return p.pin }
func (p *fakeProg) Dir() string               { return p.pin }
func (p *fakeProg) HeadID() ebpf.ProgramID    { return p.id }
func (p *fakeProg) Abandon() {
	p.f.loadMu.Lock()
	defer p.f.loadMu.Unlock()
	p.held = false
	p.f.gcProg(p)
}
func (p *fakeProg) DirectEpilogue() bool { return p.direct }

func (p *fakeProg) Pin(dir string) error {
	p.f.loadMu.Lock()
	defer p.f.loadMu.Unlock()
	if err := p.f.op("Pin", "%s", p.name); err != nil {
		return err
	}
	p.pin = dir
	p.f.pins[dir] = p.id
	return nil
}

func (p *fakeProg) Unpin() error {
	p.f.loadMu.Lock()
	defer p.f.loadMu.Unlock()
	if p.pin == "" {
		return nil
	}
	if err := p.f.op("Unpin", "%s", p.name); err != nil {
		return err
	}
	delete(p.f.pins, p.pin)
	p.pin = ""
	p.f.gcProg(p)
	return nil
}

func (p *fakeProg) Close() error {
	p.f.loadMu.Lock()
	defer p.f.loadMu.Unlock()
	if err := p.f.op("Close", "%s", p.name); err != nil {
		return err
	}
	p.held = false
	p.f.gcProg(p)
	return nil
}

func (p *fakeProg) Release(unpin bool) error {
	p.f.loadMu.Lock()
	defer p.f.loadMu.Unlock()
	if err := p.f.op("Release", "%s", p.name); err != nil {
		return err
	}
	p.held = false
	if unpin && p.pin != "" {
		delete(p.f.pins, p.pin)
		p.pin = ""
	}
	p.f.gcProg(p)
	return nil
}

// gcProg frees a program the kernel no longer references, as the kernel
// does: no pin, no holder, in no jump slot.
func (f *fakeKernel) gcProg(p *fakeProg) {
	if p.pin != "" || p.held || slices.Contains(slices.Collect(maps.Values(f.jump)), p.id) {
		return
	}
	delete(f.progs, p.id)
}

// --- sweepFacility

func (f *fakeKernel) RetainIPSets(keep []string) (int, error) {
	n := 0
	for s := range f.ipsets {
		if !slices.Contains(keep, s) {
			if err := f.op("RemoveIPSet", "%s", s); err != nil {
				return n, err
			}
			delete(f.ipsets, s)
			n++
		}
	}
	return n, nil
}

func (f *fakeKernel) ReleaseRetired([]int) (int, error) { return 0, nil }

// --- ipsetMaps

func (f *fakeKernel) ReplaceIPSet(id string, _ model.IPSetType, _ []model.IPSetMember) error {
	if err := f.op("ReplaceIPSet", "%s", id); err != nil {
		return err
	}
	f.ipsets[id] = true
	return nil
}

func (f *fakeKernel) UpdateIPSet(id string, _, _ []model.IPSetMember) error {
	if err := f.op("UpdateIPSet", "%s", id); err != nil {
		return err
	}
	f.ipsets[id] = true
	return nil
}

func (f *fakeKernel) RemoveIPSet(id string) error {
	if err := f.op("RemoveIPSet", "%s", id); err != nil {
		return err
	}
	delete(f.ipsets, id)
	return nil
}
