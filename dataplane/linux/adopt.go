package linux

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// A restarted dpd finds the previous one's work in the kernel: entry
// programs attached (TCX links pinned under links/), dpd_ifstate entries,
// policy programs in dpd_jump (pinned under progs/), routes. adopt
// rebuilds the in-memory view of it without writing anything, so that
// every packet keeps being policed as before until the controller's
// snapshot is in (the engine applies nothing before InSync). The first
// apply then claims what the controller still wants (unchanged endpoints
// cost no write at all) and garbage collection removes the rest.

// adoption summarises what adopt found, for the log.
type adoption struct {
	endpoints, closed, programs, stale int
}

// adopt rebuilds the endpoint states, the slots and the policy
// programmer's pinned programs from the pins and maps. Anything it cannot
// make sense of is left for garbage collection.
func (e *endpointProgrammer) adopt() (adoption, error) {
	var a adoption
	byHead := e.pols.openPinned()
	a.programs = len(e.pols.pinned)
	states, err := e.entry.IfStates()
	if err != nil {
		return a, err
	}
	pols, err := e.entry.Policies()
	if err != nil {
		return a, err
	}
	hepStages, err := e.hostStages()
	if err != nil {
		return a, err
	}
	installed := map[uint32][2]ebpf.ProgramID{}
	for _, p := range pols {
		v := installed[p.Slot]
		v[p.Dir] = p.Prog
		installed[p.Slot] = v
	}
	e.adoptToHost(byHead, installed)
	owners := map[uint32]*endpointState{} // workload slots by the state that reserved them
	for ifindex, ent := range states {
		name, err := e.links.LinkName(ifindex)
		if isNoDevice(err) {
			a.stale++ // the interface is gone: garbage
			continue
		}
		if err != nil {
			// Not knowing it is not knowing it is gone: collecting its
			// entry would unpolice a live interface.
			return a, fmt.Errorf("interface %d: %w", ifindex, err)
		}
		if _, dup := e.eps[name]; dup {
			a.stale++
			continue
		}
		st := &endpointState{ifindex: ifindex, adopted: true, ifsSlot: ent.Slot}
		st.host = ent.Flags&abi.IfHost != 0
		st.hostFlags = st.host
		st.ready = ent.Flags&abi.IfReady != 0
		st.closed = !st.ready
		if st.host && st.ready {
			e.adoptStages(st, ent.Flags>>abi.IfFwdShift, hepStages[ifindex], byHead, installed)
		}
		if st.ready && e.slots.reserve(ent.Slot) {
			st.slot, st.hasSlot = ent.Slot, true
			for _, dir := range []model.Direction{model.Ingress, model.Egress} {
				if sp := byHead[installed[ent.Slot][dir]]; sp != nil && sp.key.dir == dir {
					st.inst[dir] = sp
					sp.refs++
				}
			}
			if !st.host {
				owners[ent.Slot] = st
			}
		} else if o := owners[ent.Slot]; st.ready && !st.host && o != nil {
			// A policy group's slot (slotgroups.go), claimed again by
			// the first member applied.
			e.adoptShared(o, st, ent.Slot)
		}
		if st.host {
			if e.host != nil {
				if mode, ok := e.host.AttachedCurrentHost(ifindex, name); ok {
					st.mode = mode
				}
			}
		} else if mode, ok := e.entry.AttachedCurrent(ifindex, name); ok {
			st.mode = mode
		}
		e.eps[name] = st
		if st.ready {
			a.endpoints++
		} else {
			a.closed++
		}
	}
	return a, nil
}

// openPinned opens every complete pinned policy program into p.pinned,
// reserving its chain indices, and indexes them by head id.
func (p *policyProgrammer) openPinned() map[ebpf.ProgramID]*sharedProg {
	byHead := map[ebpf.ProgramID]*sharedProg{}
	names, err := p.fac.PinnedNames()
	if err != nil {
		p.log.Warn("list pinned policy programs", "err", err)
		return byHead
	}
	for _, name := range names {
		key, ok := parsePinName(name)
		if !ok {
			continue // garbage collection removes it
		}
		pp, err := p.fac.OpenPinned(name)
		if err != nil {
			p.log.Info("ignoring pinned policy program", "dir", name, "reason", err)
			continue
		}
		sp := &sharedProg{key: key, pinned: pp}
		p.pinned[key] = sp
		byHead[pp.HeadID()] = sp
	}
	return byHead
}

// parsePinName is the inverse of progKey.pinName.
func parsePinName(name string) (progKey, bool) {
	d, h, ok := strings.Cut(name, "-")
	if !ok {
		return progKey{}, false
	}
	var key progKey
	switch d {
	case model.Ingress.String():
		key.dir = model.Ingress
	case model.Egress.String():
		key.dir = model.Egress
	default:
		return progKey{}, false
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != len(key.hash) {
		return progKey{}, false
	}
	copy(key.hash[:], b)
	return key, key.pinName() == name
}

// abandon forgets every program without touching the kernel: before
// Close, and before a reopen that adopts again.
func (p *policyProgrammer) abandon() {
	for _, sp := range p.progs {
		sp.prog.Abandon()
	}
	for _, sp := range p.pinned {
		sp.pinned.Abandon()
	}
	for _, sp := range p.stale {
		sp.pinned.Abandon()
	}
	p.progs = map[progKey]*sharedProg{}
	p.pinned = map[progKey]*sharedProg{}
	p.unclaimed = map[progKey]*sharedProg{}
	p.loading = map[progKey]preloadClaim{}
	p.stale = nil
}

// claimed reports whether the engine has applied any endpoint.
func (e *endpointProgrammer) claimed() bool {
	for _, st := range e.eps {
		if st.ep != nil {
			return true
		}
	}
	return false
}
