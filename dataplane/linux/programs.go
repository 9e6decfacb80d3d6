package linux

import (
	"encoding/hex"
	"fmt"

	bpfdp "github.com/dpd-dev/dpd/dataplane/bpf"
	"github.com/dpd-dev/dpd/dataplane/bpf/polprog"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// progKey identifies a compiled program by what it enforces. The direction
// is part of the key because counter ids and ICMP/port sides depend on it.
// The IP set ids are not: a set keeps its id for as long as it exists.
type progKey struct {
	hash [32]byte
	dir  model.Direction
}

func (k progKey) String() string { return k.dir.String() + ":" + hex.EncodeToString(k.hash[:8]) }

// sharedProg is one loaded policy program and how many endpoint slots run it.
type sharedProg struct {
	prog *polprog.Program
	refs int
}

// acquireLocked returns the loaded program for pol, compiling and loading it
// on first use, and takes a reference.
func (k *Kernel) acquireLocked(pol *model.DirectionPolicy, dir model.Direction) (progKey, *sharedProg, error) {
	key := progKey{hash: pol.Hash(), dir: dir}
	if sp, ok := k.progs[key]; ok {
		sp.refs++
		return key, sp, nil
	}
	spec, err := polprog.Compile(pol, dir, k.bpf, polprog.Options{})
	if err != nil {
		return key, nil, err
	}
	m := k.bpf.Maps()
	prog, err := spec.Load(polprog.Maps{State: m.State, Jump: m.Jump, IPSets: m.IPSets, RuleCtrs: m.RuleCtrs, Chain: m.Chain})
	if err != nil {
		return key, nil, fmt.Errorf("load %s policy: %w", dir, err)
	}
	sp := &sharedProg{prog: prog, refs: 1}
	k.progs[key] = sp
	return key, sp, nil
}

// releaseLocked drops a reference; the last one closes the program. Call it
// only after no jump slot points at the program any more.
func (k *Kernel) releaseLocked(key progKey) {
	sp, ok := k.progs[key]
	if !ok {
		return
	}
	sp.refs--
	if sp.refs > 0 {
		return
	}
	delete(k.progs, key)
	if err := sp.prog.Close(); err != nil {
		k.log.Warn("close policy program", "program", key, "err", err)
	}
}

// Rules returns the counter table of the program installed for an
// interface's direction, for Inspect and trace.
func (k *Kernel) Rules(iface string, dir model.Direction) ([]polprog.RuleInfo, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.eps[iface]
	if !ok || !st.installed[dir] {
		return nil, false
	}
	sp, ok := k.progs[st.prog[dir]]
	if !ok {
		return nil, false
	}
	return sp.prog.Rules(), true
}

// ProgramCount is how many distinct policy programs are loaded.
func (k *Kernel) ProgramCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.progs)
}

var _ polprog.Resolver = (*bpfdp.Dataplane)(nil)
