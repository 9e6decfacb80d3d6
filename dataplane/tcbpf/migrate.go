package tcbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Pinned maps outlive dpd, so a new version (or new sizes) may find maps
// whose layout differs from what it loads. Dropping them would empty
// conntrack, IP sets and interface state under live traffic; instead the
// contents are copied into a map of the new layout, which then replaces the
// old one at its pin path. The old map lives on for as long as programs
// attached by the previous dpd use it, so enforcement never stops.

// scratchMaps hold per-packet scratch, not state: never worth migrating.
// The flow-event maps hold nothing a restart needs: unread events and
// rate-limit state are lost at most. dpd_fwd_cfg is written at every Open,
// and dpd_fwd_cache refills itself from the FIB.
var scratchMaps = map[string]bool{abi.MapState: true, abi.MapTrace: true,
	abi.MapEvents: true, abi.MapEvDrops: true, abi.MapEvCfg: true, abi.MapEvDeny: true,
	abi.MapFwdCfg: true, abi.MapFwdCache: true}

// MigrationReport says what migratePins did to one map.
type MigrationReport struct {
	Map      string
	Reason   string // why the pinned map was incompatible
	Copied   int    // entries carried over
	Dropped  int    // entries that did not fit or could not be converted
	Replaced bool   // false: the old contents were discarded
}

// migratePins makes every pinned map usable by spec: compatible ones stay,
// convertible ones are migrated, the rest are unpinned (their state is
// lost, and logged).
func (d *Datapath) migratePins(spec *ebpf.CollectionSpec) error {
	for name, ms := range spec.Maps {
		if ms.Pinning != ebpf.PinByName {
			continue
		}
		path := filepath.Join(d.opts.PinDir, name)
		old, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open pinned map %s: %w", name, err)
		}
		rep, err := d.migrateOne(name, path, ms, old)
		_ = old.Close()
		if err != nil {
			return err
		}
		if rep == nil {
			continue
		}
		d.migrations = append(d.migrations, *rep)
		if rep.Replaced {
			d.log.Info("migrated pinned map to its new layout", "map", name, "reason", rep.Reason,
				"copied", rep.Copied, "dropped", rep.Dropped)
		} else {
			d.log.Warn("replaced pinned map; its contents could not be converted", "map", name, "reason", rep.Reason)
		}
	}
	return nil
}

// migrateOne handles one pinned map; nil means it is compatible as it is.
func (d *Datapath) migrateOne(name, path string, ms *ebpf.MapSpec, old *ebpf.Map) (*MigrationReport, error) {
	cerr := ms.Compatible(old)
	if cerr == nil {
		why, err := layoutChanged(name, old)
		if err != nil {
			return nil, fmt.Errorf("check pinned map %s: %w", name, err)
		}
		if why == "" {
			return nil, nil
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("unpin %s: %w", name, err)
		}
		return &MigrationReport{Map: name, Reason: why}, nil
	}
	if !errors.Is(cerr, ebpf.ErrMapIncompatible) {
		return nil, fmt.Errorf("check pinned map %s: %w", name, cerr)
	}
	rep := &MigrationReport{Map: name, Reason: cerr.Error()}
	conv, err := convertible(name, ms, old)
	if err != nil {
		// Not knowing its layout is no reason to throw its contents away.
		return nil, fmt.Errorf("check pinned map %s: %w", name, err)
	}
	if !conv {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("unpin %s: %w", name, err)
		}
		return rep, nil
	}
	fresh := ms.Copy()
	fresh.Pinning = ebpf.PinNone
	nm, err := ebpf.NewMap(fresh)
	if err != nil {
		return nil, fmt.Errorf("create new %s: %w", name, err)
	}
	defer func() { _ = nm.Close() }()
	if rep.Copied, rep.Dropped, err = copyEntries(old, nm); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	if ms.Type == ebpf.ProgramArray {
		// The kernel empties a program array once no descriptor or pin
		// holds it, and the programs attached by the previous dpd still
		// tail-call through the old one: keep it pinned aside until
		// ReleaseRetired finds nothing using it.
		if err := d.retire(name, path, old); err != nil {
			return nil, err
		}
	}
	// Pin beside the old one, then rename over it: the path always holds
	// a complete map, even if dpd dies here.
	tmp := path + "_migrating" // bpffs names may not contain dots
	_ = os.Remove(tmp)
	if err := nm.Pin(tmp); err != nil {
		return nil, fmt.Errorf("pin new %s: %w", name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("swap in new %s: %w", name, err)
	}
	rep.Replaced = true
	return rep, nil
}

// retiredDir holds program arrays replaced by a migration while programs
// may still use them.
const retiredDir = "retired"

func (d *Datapath) retiredPath() string { return filepath.Join(d.opts.PinDir, retiredDir) }

// retire pins old under retired/<name>_<map id>.
func (d *Datapath) retire(name, path string, old *ebpf.Map) error {
	info, err := old.Info()
	if err != nil {
		return fmt.Errorf("retire %s: %w", name, err)
	}
	id, _ := info.ID()
	dir := d.retiredPath()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("retire %s: %w", name, err)
	}
	dst := filepath.Join(dir, fmt.Sprintf("%s_%d", name, id))
	if err := old.Pin(dst); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("retire %s: %w", name, err)
	}
	return nil
}

// ReleaseRetired unpins the retired program arrays that nothing in use
// references any more: no program in the current dpd_jump or dpd_chain,
// and no program attached to the given interfaces. It returns how many
// are still kept.
func (d *Datapath) ReleaseRetired(ifindexes []int) (kept int, err error) {
	dir := d.retiredPath()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list retired maps: %w", err)
	}
	if len(ents) == 0 {
		_ = os.Remove(dir)
		return 0, nil
	}
	used := map[ebpf.MapID]bool{}
	var progs []ebpf.ProgramID
	for _, m := range []*ebpf.Map{d.objs.DpdJump, d.objs.DpdChain} {
		ids, err := programArrayIDs(m)
		if err != nil {
			return len(ents), err
		}
		progs = append(progs, ids...)
	}
	for _, ifindex := range ifindexes {
		ids, err := d.attachedPrograms(ifindex)
		if err != nil {
			// What uses a retired map cannot be known: keep them all.
			return len(ents), err
		}
		progs = append(progs, ids...)
	}
	for _, pid := range progs {
		id, err := attachedIdentity(pid)
		if errors.Is(err, os.ErrNotExist) {
			continue // gone meanwhile
		}
		if err != nil {
			return len(ents), err
		}
		for _, mid := range id.mapIDs {
			used[mid] = true
		}
	}
	var errs []error
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("open retired %s: %w", e.Name(), err))
			kept++
			continue
		}
		info, ierr := m.Info()
		_ = m.Close()
		if ierr != nil {
			errs = append(errs, fmt.Errorf("retired %s: %w", e.Name(), ierr))
			kept++
			continue
		}
		if mid, _ := info.ID(); used[mid] {
			kept++
			continue
		}
		if err := os.Remove(path); err != nil {
			errs = append(errs, fmt.Errorf("release retired %s: %w", e.Name(), err))
		}
	}
	return kept, errors.Join(errs...)
}

// programArrayIDs lists the program ids installed in a program array.
func programArrayIDs(m *ebpf.Map) ([]ebpf.ProgramID, error) {
	var out []ebpf.ProgramID
	var k, v uint32
	it := m.Iterate()
	for it.Next(&k, &v) {
		out = append(out, ebpf.ProgramID(v))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("iterate %s: %w", m, err)
	}
	return out, nil
}

// convertible: same type and key size, and a value that is the same or
// longer (fields appended; the new tail starts zeroed).
func convertible(name string, ms *ebpf.MapSpec, old *ebpf.Map) (bool, error) {
	if scratchMaps[name] {
		return false, nil
	}
	info, err := old.Info()
	if err != nil {
		return false, err
	}
	if info.Type != ms.Type || info.KeySize != ms.KeySize || info.ValueSize > ms.ValueSize {
		return false, nil
	}
	switch ms.Type {
	case ebpf.Hash, ebpf.LRUHash, ebpf.LPMTrie, ebpf.Array, ebpf.PerCPUHash, ebpf.LRUCPUHash,
		ebpf.PerCPUArray, ebpf.ProgramArray:
		return true, nil
	}
	return false, nil
}

// copyEntries copies old's entries into nm, zero-padding grown values.
// Entries that do not fit (a smaller map) are counted as dropped.
func copyEntries(old, nm *ebpf.Map) (copied, dropped int, err error) {
	oi, err := old.Info()
	if err != nil {
		return 0, 0, err
	}
	key := make([]byte, oi.KeySize)
	next := make([]byte, oi.KeySize)
	var cur any // nil: start from the first key
	for {
		if err := old.NextKey(cur, next); errors.Is(err, ebpf.ErrKeyNotExist) {
			return copied, dropped, nil
		} else if err != nil {
			return copied, dropped, fmt.Errorf("iterate: %w", err)
		}
		copy(key, next)
		cur = key
		ok, err := copyEntry(old, nm, key)
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			continue // deleted meanwhile, or an empty program array slot
		case err != nil:
			dropped++
		case ok:
			copied++
		}
	}
}

// copyEntry copies one key; ok is false when the key has no value (an
// empty array slot of a program array).
func copyEntry(old, nm *ebpf.Map, key []byte) (bool, error) {
	typ := nm.Type()
	switch {
	case typ == ebpf.ProgramArray:
		var id uint32
		if err := old.Lookup(key, &id); err != nil {
			return false, err
		}
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			return false, fmt.Errorf("program %d: %w", id, err)
		}
		defer func() { _ = prog.Close() }()
		return true, nm.Update(key, prog, ebpf.UpdateAny)
	case isPerCPU(typ):
		var vals [][]byte
		if err := old.Lookup(key, &vals); err != nil {
			return false, err
		}
		for i := range vals {
			vals[i] = pad(vals[i], int(nm.ValueSize()))
		}
		return true, nm.Update(key, vals, ebpf.UpdateAny)
	default:
		val := make([]byte, old.ValueSize())
		if err := old.Lookup(key, val); err != nil {
			return false, err
		}
		return true, nm.Update(key, pad(val, int(nm.ValueSize())), ebpf.UpdateAny)
	}
}

func isPerCPU(t ebpf.MapType) bool {
	return t == ebpf.PerCPUHash || t == ebpf.PerCPUArray || t == ebpf.LRUCPUHash
}

func pad(b []byte, n int) []byte {
	if len(b) >= n {
		return b[:n]
	}
	return append(b, make([]byte, n-len(b))...)
}

// Migrations reports the maps Open migrated or replaced.
func (d *Datapath) Migrations() []MigrationReport {
	return append([]MigrationReport(nil), d.migrations...)
}

// PinnedSizes reads the sizes of the maps pinned under pinDir, so a
// restarted dpd opens them as they are instead of migrating them to the
// defaults before the controller has said which sizes it wants. ok is
// false when nothing is pinned there; absent maps keep the defaults. A
// pinned map that cannot be read is an error: opening with other sizes
// would migrate it, dropping what does not fit.
func PinnedSizes(pinDir string) (s MapSizes, ok bool, err error) {
	if pinDir == "" {
		pinDir = abi.PinDir
	}
	s = DefaultMapSizes()
	// A node a dpd before dpd_conntrack ran has its size on dpd_ct.
	ctNew, ctOld := 0, 0
	for name, dst := range map[string]*int{
		abi.MapConntrack: &ctNew, abi.MapConntrackLRU: &ctOld, abi.MapIPSets: &s.IPSets, abi.MapIfState: &s.IfState,
		abi.MapRuleCtrs: &s.RuleCounters, abi.MapJump: &s.Jump, abi.MapChain: &s.Chain,
		abi.MapNATFrontends: &s.NATFrontend, abi.MapNATBackends: &s.NATBackend, abi.MapRoutes: &s.Routes,
		abi.MapFrags: &s.Fragments,
	} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return DefaultMapSizes(), false, fmt.Errorf("read pinned %s: %w", name, err)
		}
		*dst = int(m.MaxEntries())
		ok = true
		_ = m.Close()
	}
	switch {
	case ctNew > 0:
		s.Conntrack = ctNew
	case ctOld > 0:
		s.Conntrack = ctOld
	}
	if !ok || s.validate() != nil {
		return DefaultMapSizes(), false, nil
	}
	return s, true, nil
}
