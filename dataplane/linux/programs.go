package linux

import (
	"encoding/hex"
	"fmt"
	"path/filepath"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// progKey identifies a compiled program by what it enforces. The direction
// is part of the key because counter ids and ICMP/port sides depend on it.
// The IP set ids are not: a set keeps its id for as long as it exists.
type progKey struct {
	hash [32]byte
	dir  model.Direction
}

func (k progKey) String() string { return k.dir.String() + ":" + hex.EncodeToString(k.hash[:8]) }

// pinName is the program's directory under <pin>/progs.
func (k progKey) pinName() string { return k.dir.String() + "-" + hex.EncodeToString(k.hash[:]) }

// progsDir holds the pinned policy programs.
func (k *Kernel) progsDirLocked() string { return filepath.Join(k.bpf.PinDir(), "progs") }

// sharedProg is one policy program and how many endpoint slots run it.
// Exactly one of prog and pinned is set: prog for a program this process
// loaded or verified, pinned for one an earlier dpd left in a slot and that
// no endpoint has claimed yet (it keeps running until replaced).
// preloaded marks a program PreloadPolicies loaded that no endpoint has
// taken yet (refs 0); EndApply, or else the next batch, or else a periodic
// collection once it is older than the collection interval, releases it
// if none does.
type sharedProg struct {
	key       progKey
	prog      *polprog.Program
	pinned    *polprog.Pinned
	refs      int
	preloaded bool
	loadedAt  time.Time
}

// acquireLocked returns the program for pol, taking a reference: the one
// already loaded, else the pinned one an earlier dpd loaded if it is
// exactly what pol compiles to now (adopted, nothing written), else a new
// load, pinned for the next restart.
func (k *Kernel) acquireLocked(pol *model.DirectionPolicy, dir model.Direction) (*sharedProg, error) {
	key := progKey{hash: pol.Hash(), dir: dir}
	if sp, ok := k.progs[key]; ok {
		sp.refs++
		sp.preloaded = false
		return sp, nil
	}
	spec, err := polprog.Compile(pol, dir, k.bpf, polprog.Options{})
	if err != nil {
		return nil, err
	}
	maps := k.policyMapsLocked()
	if ap, ok := k.pinned[key]; ok {
		prog, err := spec.Adopt(maps, ap.pinned)
		if err == nil {
			delete(k.pinned, key)
			ap.prog, ap.pinned = prog, nil
			ap.refs++
			k.progs[key] = ap
			k.ops.ProgramAdopts++
			return ap, nil
		}
		// Stale (another compiler, other maps): it keeps running where it
		// is installed until replaced, but gives up its pin path.
		k.log.Info("pinned policy program is out of date; loading a new one", "program", key, "reason", err)
		delete(k.pinned, key)
		if ap.refs == 0 {
			if err := ap.pinned.Release(true); err != nil {
				k.log.Warn("release stale policy program", "program", key, "err", err)
			}
		} else {
			if err := ap.pinned.Unpin(); err != nil {
				k.log.Warn("unpin stale policy program", "program", key, "err", err)
			}
			k.stale = append(k.stale, ap)
		}
	}
	prog, err := spec.Load(maps)
	if err != nil {
		return nil, fmt.Errorf("load %s policy: %w", dir, err)
	}
	sp := k.addLoadedLocked(key, prog)
	sp.refs = 1
	return sp, nil
}

// policyMapsLocked are the maps policy programs are loaded against.
func (k *Kernel) policyMapsLocked() polprog.Maps {
	m := k.bpf.Maps()
	return polprog.Maps{State: m.State, Jump: m.Jump, IPSets: m.IPSets, RuleCtrs: m.RuleCtrs, Chain: m.Chain,
		IPSetIdx: k.bpf.IPSetIndex()}
}

// addLoadedLocked counts, pins (for the next restart) and records a
// program just loaded for key, without references.
func (k *Kernel) addLoadedLocked(key progKey, prog *polprog.Program) *sharedProg {
	k.ops.ProgramLoads++
	if err := prog.Pin(filepath.Join(k.progsDirLocked(), key.pinName())); err != nil {
		// Still enforceable; only a restart would have to reload it.
		k.log.Warn("pin policy program", "program", key, "err", err)
	}
	sp := &sharedProg{key: key, prog: prog, loadedAt: time.Now()}
	k.progs[key] = sp
	return sp
}

// releaseLocked drops a reference; the last one closes and unpins the
// program. Call it only after no jump slot points at the program any more.
func (k *Kernel) releaseLocked(sp *sharedProg) {
	if sp == nil {
		return
	}
	sp.refs--
	if sp.refs > 0 {
		return
	}
	k.dropLocked(sp)
}

// dropLocked forgets sp and closes and unpins it. No jump slot may point
// at it any more.
func (k *Kernel) dropLocked(sp *sharedProg) {
	if k.progs[sp.key] == sp {
		delete(k.progs, sp.key)
	}
	if k.pinned[sp.key] == sp {
		delete(k.pinned, sp.key)
	}
	for i, s := range k.stale {
		if s == sp {
			k.stale = append(k.stale[:i], k.stale[i+1:]...)
			break
		}
	}
	if sp.pinned != nil {
		if err := sp.pinned.Release(true); err != nil {
			k.log.Warn("release pinned policy program", "program", sp.key, "err", err)
		}
		return
	}
	if err := sp.prog.Close(); err != nil {
		k.log.Warn("close policy program", "program", sp.key, "err", err)
	}
	if err := sp.prog.Unpin(); err != nil {
		k.log.Warn("unpin policy program", "program", sp.key, "err", err)
	}
}

// ProgramCount is how many distinct policy programs are loaded.
func (k *Kernel) ProgramCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.progs)
}

var _ polprog.Resolver = (*tcbpf.Datapath)(nil)
