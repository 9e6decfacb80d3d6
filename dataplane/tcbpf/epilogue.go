package tcbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cilium/ebpf"
)

// Epilogue arrays: small PROG_ARRAYs that each hold dpd_epilogue at index 0,
// so a policy program can tail-call the epilogue with a constant index into
// a map of its own (polprog.Maps.Epilogue). The JIT turns that into a
// direct jump; an indirect tail call (a variable index, or dpd_jump) goes
// through a retpoline where the CPU needs one, about 10 ns per new flow.
//
// They are separate from dpd_jump, and several, because the kernel keeps a
// list of the programs that direct-call each array: every write to the
// array walks it (and patches those programs when the slot changes), and so
// does loading or freeing one of them. dpd_jump is written for every
// endpoint; these are written only when the epilogue changes, and
// programs are spread over epilogueArrays of them so the lists stay short.
const (
	epilogueArrays = 32
	epilogueDir    = "epilogue" // under PinDir: epi0 … epi31
)

// epilogues are the epilogue arrays and the round-robin cursor over them.
type epilogues struct {
	maps []*ebpf.Map
	next atomic.Uint32
}

// openEpilogues opens (or creates) the pinned epilogue arrays and installs
// the loaded epilogue in each where the installed one is not equivalent.
// Pins survive restarts so adopted policy programs keep calling the
// current epilogue.
func (d *Datapath) openEpilogues() error {
	dir := filepath.Join(d.opts.PinDir, epilogueDir)
	direct, why := d.epilogueCall(dir)
	d.log.Info("epilogue call chosen", "direct", direct, "reason", why)
	if !direct {
		// Programs call dpd_jump[abi.JumpEpilogue]; pinned arrays of an
		// earlier choice stay for the programs still calling them, with
		// this epilogue in them, as in dpd_jump.
		return d.refreshEpilogues(dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create epilogue pin dir: %w", err)
	}
	e := &epilogues{}
	fail := func(err error) error {
		for _, m := range e.maps {
			_ = m.Close()
		}
		return err
	}
	for i := range epilogueArrays {
		spec := &ebpf.MapSpec{
			Name: fmt.Sprintf("epi%d", i), Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1,
			Pinning: ebpf.PinByName,
		}
		opts := ebpf.MapOptions{PinPath: dir}
		m, err := ebpf.NewMapWithOptions(spec, opts)
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			// Programs still calling the old array need it filled: the
			// kernel empties a program array when its last pin goes, so it
			// moves to retired/ (released as migrated maps are).
			if err := d.retireEpilogue(filepath.Join(dir, spec.Name)); err != nil {
				return fail(err)
			}
			m, err = ebpf.NewMapWithOptions(spec, opts)
		}
		if err != nil {
			return fail(fmt.Errorf("open epilogue array %s: %w", spec.Name, err))
		}
		e.maps = append(e.maps, m)
		if err := d.installEpilogue(m, spec.Name); err != nil {
			return fail(err)
		}
	}
	d.epi = e
	return nil
}

// installEpilogue puts this epilogue into an epilogue array unless an
// equivalent one is there.
func (d *Datapath) installEpilogue(m *ebpf.Map, name string) error {
	var cur uint32
	if err := m.Lookup(uint32(0), &cur); err == nil && d.isCurrent(ebpf.ProgramID(cur), d.objs.DpdEpilogue) {
		return nil
	}
	if err := m.Update(uint32(0), d.objs.DpdEpilogue, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("install epilogue in %s: %w", name, err)
	}
	return nil
}

// refreshEpilogues puts this epilogue into the pinned arrays an earlier
// choice of direct calls left, for the programs still calling them.
func (d *Datapath) refreshEpilogues(dir string) error {
	for i := range epilogueArrays {
		path := filepath.Join(dir, fmt.Sprintf("epi%d", i))
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open epilogue array %s: %w", path, err)
		}
		err = d.installEpilogue(m, path)
		_ = m.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// retireEpilogue moves an epilogue array of another layout to retired/.
func (d *Datapath) retireEpilogue(path string) error {
	old, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return fmt.Errorf("open old epilogue array %s: %w", path, err)
	}
	defer func() { _ = old.Close() }()
	if err := d.retire(filepath.Base(path), path, old); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replace epilogue array %s: %w", path, err)
	}
	return nil
}

// EpilogueArray is an epilogue array for the next policy program to load
// (polprog.Maps.Epilogue), taken in turn; nil when programs call the
// epilogue indirectly (Options.Epilogue, or the probe found no gain).
func (d *Datapath) EpilogueArray() *ebpf.Map {
	if d.epi == nil {
		return nil
	}
	n := d.epi.next.Add(1)
	return d.epi.maps[int(n)%len(d.epi.maps)]
}

// EpilogueArrays are all the epilogue arrays (polprog.Maps.Epilogues: an
// adopted program may call any of them).
func (d *Datapath) EpilogueArrays() []*ebpf.Map {
	if d.epi == nil {
		return nil
	}
	return d.epi.maps
}

func (e *epilogues) close() error {
	if e == nil {
		return nil
	}
	var errs []error
	for _, m := range e.maps {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}
