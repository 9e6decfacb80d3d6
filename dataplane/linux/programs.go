package linux

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

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

// pinName is the program's directory under <pin>/progs.
func (k progKey) pinName() string { return k.dir.String() + "-" + hex.EncodeToString(k.hash[:]) }

// policyProgrammer loads, shares, pins and adopts the policy programs:
// one per distinct content, reference-counted by the endpoint slots that
// run it. Called under Kernel.mu, except the loads of PreloadPolicies.
type policyProgrammer struct {
	fac programFacility
	log *slog.Logger
	ops *Ops

	progs  map[progKey]*sharedProg // loaded (or verified) by this process
	pinned map[progKey]*sharedProg // pinned by an earlier dpd, not yet claimed
	// unclaimed holds the preloaded programs of progs no endpoint took
	// yet, so that releasing them costs the preloads, not every program.
	unclaimed map[progKey]*sharedProg
	// loading holds the programs being preloaded now, each with its job.
	loading map[progKey]preloadClaim
	stale   []*sharedProg // pinned programs found out of date, still in some slot
	// reloadQ holds the programs in use that wait for the direct reloader
	// (directreload.go), oldest first.
	reloadQ []*sharedProg
	// keepCounters lists the counter ids other programs (staged
	// previews) created, which garbage collection keeps; nil: none.
	keepCounters func() []uint64
}

func newPolicyProgrammer(fac programFacility, log *slog.Logger, ops *Ops) *policyProgrammer {
	return &policyProgrammer{fac: fac, log: log, ops: ops, progs: map[progKey]*sharedProg{}, pinned: map[progKey]*sharedProg{},
		unclaimed: map[progKey]*sharedProg{}, loading: map[progKey]preloadClaim{}}
}

// sharedProg is one policy program and how many endpoint slots run it.
// Exactly one of prog and pinned is set: prog for a program this process
// loaded or verified, pinned for one an earlier dpd left in a slot and that
// no endpoint has claimed yet (it keeps running until replaced).
// A program PreloadPolicies loaded that no endpoint has taken yet (refs
// 0) is in the programmer's unclaimed map; EndApply, or else the next
// batch, or else a periodic collection once it is older than the
// collection interval, releases it if none does.
type sharedProg struct {
	key      progKey
	prog     loadedProgram
	pinned   pinnedProgram
	refs     int
	loadedAt time.Time
	// pol is the policy acquire compiled prog from (nil for adopted
	// programs until an endpoint acquires them); the kernel keeps what an
	// endpoint was applied with unchanged.
	pol *model.DirectionPolicy
	// reload: this process loaded prog with the indirect epilogue call
	// while the datapath chose the direct one; queued: it is in reloadQ.
	reload, queued bool
}

// acquire returns the program for pol, taking a reference: the one
// already loaded, else the pinned one an earlier dpd loaded if it is
// exactly what pol compiles to now (adopted, nothing written), else a new
// load, pinned for the next restart.
func (p *policyProgrammer) acquire(pol *model.DirectionPolicy, dir model.Direction) (*sharedProg, error) {
	key := progKey{hash: pol.Hash(), dir: dir}
	if sp, ok := p.progs[key]; ok {
		sp.refs++
		p.setPreloaded(sp, false)
		p.taken(sp, pol)
		return sp, nil
	}
	if sp := p.claimPinned(key, pol, dir); sp != nil {
		sp.refs++
		p.taken(sp, pol)
		return sp, nil
	}
	prog, err := p.fac.Load(pol, dir)
	if err != nil {
		return nil, fmt.Errorf("load %s policy: %w", dir, err)
	}
	sp := p.addLoaded(key, prog)
	sp.refs = 1
	p.taken(sp, pol)
	return sp, nil
}

// taken records that an endpoint acquired sp with pol, and queues it for
// the direct reloader if it waits for one.
func (p *policyProgrammer) taken(sp *sharedProg, pol *model.DirectionPolicy) {
	if sp.pol == nil {
		c := *pol // not the endpoint it belongs to
		sp.pol = &c
	}
	if sp.reload && !sp.queued {
		sp.queued = true
		p.reloadQ = append(p.reloadQ, sp)
		if len(p.reloadQ) > 2*len(p.progs)+64 {
			p.compactReloadQ() // churn kept the reloader waiting
		}
	}
}

// claimPinned takes over the program an earlier dpd pinned for key if it
// is exactly what pol compiles to now (adopted, nothing written; the
// references of the adopted endpoints that run it stay), else gives the
// pinned program up and returns nil.
func (p *policyProgrammer) claimPinned(key progKey, pol *model.DirectionPolicy, dir model.Direction) *sharedProg {
	ap, ok := p.pinned[key]
	if !ok {
		return nil
	}
	delete(p.pinned, key)
	prog, err := p.fac.Adopt(pol, dir, ap.pinned)
	if err == nil {
		ap.prog, ap.pinned = prog, nil
		p.progs[key] = ap
		p.ops.ProgramAdopts++
		return ap
	}
	// Stale (another compiler, other maps): it keeps running where it is
	// installed until replaced, but gives up its pin path.
	p.log.Info("pinned policy program is out of date; loading a new one", "program", key, "reason", err)
	if ap.refs == 0 {
		if err := ap.pinned.Release(true); err != nil {
			p.log.Warn("release stale policy program", "program", key, "err", err)
		}
	} else {
		if err := ap.pinned.Unpin(); err != nil {
			p.log.Warn("unpin stale policy program", "program", key, "err", err)
		}
		p.stale = append(p.stale, ap)
	}
	return nil
}

// addLoaded counts, pins (for the next restart) and records a program
// just loaded for key, without references. Every program a slot may name
// is pinned: the pins reserve its dpd_chain indices in the next process,
// which would otherwise give them to its own loads while a slot still
// tail-calls them.
func (p *policyProgrammer) addLoaded(key progKey, prog loadedProgram) *sharedProg {
	p.ops.ProgramLoads++
	sp := &sharedProg{key: key, prog: prog, loadedAt: time.Now(), reload: p.fac.DirectEpilogue() && !prog.DirectEpilogue()}
	p.pin(sp)
	p.progs[key] = sp
	return sp
}

// setPreloaded lists sp as preloaded and not taken, or not.
func (p *policyProgrammer) setPreloaded(sp *sharedProg, on bool) {
	switch {
	case on:
		p.unclaimed[sp.key] = sp
	case p.unclaimed[sp.key] == sp:
		delete(p.unclaimed, sp.key)
	}
}

// pin pins sp's program for the next restart.
func (p *policyProgrammer) pin(sp *sharedProg) {
	if err := sp.prog.Pin(filepath.Join(p.fac.ProgsDir(), sp.key.pinName())); err != nil {
		// Still enforceable; only a restart would have to reload it.
		p.log.Warn("pin policy program", "program", sp.key, "err", err)
	}
}

// release drops a reference; the last one closes and unpins the program.
// Call it only after no jump slot points at the program any more.
func (p *policyProgrammer) release(sp *sharedProg) {
	if sp == nil {
		return
	}
	sp.refs--
	if sp.refs > 0 {
		return
	}
	p.drop(sp)
}

// drop forgets sp and closes and unpins it. No jump slot may point at it
// any more.
func (p *policyProgrammer) drop(sp *sharedProg) {
	if p.progs[sp.key] == sp {
		delete(p.progs, sp.key)
	}
	if p.pinned[sp.key] == sp {
		delete(p.pinned, sp.key)
	}
	p.setPreloaded(sp, false)
	for i, s := range p.stale {
		if s == sp {
			p.stale = append(p.stale[:i], p.stale[i+1:]...)
			break
		}
	}
	if sp.pinned != nil {
		if err := sp.pinned.Release(true); err != nil {
			p.log.Warn("release pinned policy program", "program", sp.key, "err", err)
		}
		return
	}
	if err := sp.prog.Close(); err != nil {
		p.log.Warn("close policy program", "program", sp.key, "err", err)
	}
	if err := sp.prog.Unpin(); err != nil {
		p.log.Warn("unpin policy program", "program", sp.key, "err", err)
	}
}
