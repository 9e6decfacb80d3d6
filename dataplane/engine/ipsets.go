package engine

import (
	"fmt"
	"sort"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// ipsetEntry is one IP set: desired membership plus what the kernel holds.
// The membership is members, sorted, with pending on top: the members
// added (true) or removed (false) since members was last brought up to
// date (ipsets_entry.go). When the next apply is a delta, members is
// exactly the kernel's content and pending the delta, so neither layer
// needs a second copy of the set.
type ipsetEntry struct {
	typ     model.IPSetType
	members []setMember
	pending map[setMember]bool
	stale   bool // not re-sent yet in the current epoch
	removed bool // IPSetRemove seen; the kernel copy goes once unreferenced

	inKernel  bool // the kernel holds the set
	kernelTyp model.IPSetType
	replace   bool // the next apply must ReplaceIPSet
	force     bool // resync: replace even if clean
	retry     retryState
	lastErr   string
}

func (s *ipsetEntry) present() bool { return !s.removed }

// ipsetManager holds every IP set. Sets are applied before endpoints and
// removed after them; a removed set stays in the kernel while an applied
// endpoint still references it.
type ipsetManager struct {
	sets map[string]*ipsetEntry
	dirtyQueue[string]
}

func (m *ipsetManager) init() {
	m.sets = map[string]*ipsetEntry{}
	m.dirty = map[string]struct{}{}
	m.retryOf = func(id string) *retryState { return &m.sets[id].retry }
}

// exists reports whether the controller has the set (references resolve).
func (m *ipsetManager) exists(id string) bool {
	s := m.sets[id]
	return s != nil && s.present()
}

// programmed reports whether the kernel holds the set, so that an
// endpoint referencing it may be applied.
func (m *ipsetManager) programmed(id string) bool {
	s := m.sets[id]
	return s != nil && s.present() && s.inKernel
}

func (m *ipsetManager) count() int {
	n := 0
	for _, s := range m.sets {
		if s.present() {
			n++
		}
	}
	return n
}

// update replaces the set's membership. It reports whether the set came
// into existence (endpoints waiting for it must be re-resolved).
func (m *ipsetManager) update(id string, typ model.IPSetType, members []model.IPSetMember) (appeared bool) {
	want := toSetMembers(members)
	s, ok := m.sets[id]
	if ok && s.present() && s.typ == typ && s.equal(want) {
		s.stale = false
		return false
	}
	appeared = !ok || !s.present()
	if !ok {
		s = &ipsetEntry{}
		m.sets[id] = s
	}
	s.typ, s.members, s.pending = typ, want, nil
	s.stale, s.removed, s.replace = false, false, true
	s.retry.reset()
	m.dirty[id] = struct{}{}
	return appeared
}

// delta applies added/removed members to a present set: removed first,
// so a member in both stays.
func (m *ipsetManager) delta(id string, added, removed []model.IPSetMember) {
	s := m.sets[id]
	dirty := false
	for _, mem := range removed {
		dirty = s.set(toSetMember(mem), false) || dirty
	}
	for _, mem := range added {
		dirty = s.set(toSetMember(mem), true) || dirty
	}
	if dirty {
		s.foldIfLarge()
		s.retry.reset()
		m.dirty[id] = struct{}{}
	}
}

// remove marks the set removed and reports whether it was present.
func (m *ipsetManager) remove(id string) bool {
	s, ok := m.sets[id]
	if !ok || !s.present() {
		return false
	}
	s.removed, s.stale = true, false
	s.retry.reset()
	m.dirty[id] = struct{}{}
	return true
}

// undefer re-queues a removed set once nothing applied references it.
func (m *ipsetManager) undefer(id string) {
	if s, ok := m.sets[id]; ok && s.removed {
		m.dirty[id] = struct{}{}
	}
}

func (m *ipsetManager) markStale() {
	for _, s := range m.sets {
		if s.present() {
			s.stale = true
		}
	}
}

func (m *ipsetManager) sweep() []string {
	var out []string
	for id, s := range m.sets {
		if s.present() && s.stale {
			m.remove(id)
			out = append(out, id)
		}
	}
	return out
}

func (m *ipsetManager) markAllForResync() {
	for id, s := range m.sets {
		if s.present() {
			s.force = true
			m.dirty[id] = struct{}{}
		}
	}
}

func (m *ipsetManager) sortedDirty() []string {
	ids := make([]string, 0, len(m.dirty))
	for id := range m.dirty {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// onIPSetUpdate stores a full set.
func (e *Engine) onIPSetUpdate(u *model.IPSetUpdate) {
	old := e.ipsets.sets[u.ID]
	typeChanged := old != nil && old.present() && old.typ != u.Type
	if e.ipsets.update(u.ID, u.Type, u.Members) || typeChanged {
		e.weps.dirtySetUsers(u.ID)
		e.heps.refChanged()
	}
}

// onIPSetDelta applies a delta to a known set. The delta names no type, so
// its members are checked against the set's here; one that does not fit
// refuses the whole delta.
func (e *Engine) onIPSetDelta(u *model.IPSetDeltaUpdate) error {
	s := e.ipsets.sets[u.ID]
	if s == nil || !s.present() {
		return fmt.Errorf("ip set delta for unknown set %q", u.ID)
	}
	for _, l := range []struct {
		what    string
		members []model.IPSetMember
	}{{"added", u.Added}, {"removed", u.Removed}} {
		for i, m := range l.members {
			if err := s.typ.Check(m); err != nil {
				return fmt.Errorf("ip set %s %s: member %d: %w", u.ID, l.what, i, err)
			}
		}
	}
	s.stale = false
	e.ipsets.delta(u.ID, u.Added, u.Removed)
	return nil
}

func (e *Engine) onIPSetRemove(r *model.IPSetRemove) {
	if e.ipsets.remove(r.ID) {
		e.weps.dirtySetUsers(r.ID)
		e.heps.refChanged()
	}
}

// applyIPSetUpserts programs new and changed sets: a full replace when the
// kernel lacks the set, its type changed or a resync forces it, else the
// delta. A set that reaches the kernel for the first time re-queues the
// endpoints waiting for it.
func (e *Engine) applyIPSetUpserts(now time.Time, p *pass) {
	for _, id := range e.ipsets.sortedDirty() {
		s := e.ipsets.sets[id]
		if !s.present() || !s.retry.due(now) {
			continue
		}
		var err error
		var add, del []setMember
		if s.force || s.replace || !s.inKernel || s.kernelTyp != s.typ {
			s.fold()
			err = e.k.ReplaceIPSet(id, s.typ, toModelMembers(s.members))
		} else {
			add, del = s.pendingSorted()
			if len(add) == 0 && len(del) == 0 {
				s.pending = nil
				delete(e.ipsets.dirty, id)
				continue
			}
			err = e.k.UpdateIPSet(id, toModelMembers(add), toModelMembers(del))
		}
		p.did = true
		if err != nil {
			s.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
			s.lastErr = err.Error()
			p.fail("ipset", id, err)
			continue
		}
		if len(add) > 0 || len(del) > 0 {
			s.members, s.pending = mergeSetMembers(s.members, add, del), nil
		}
		first := !s.inKernel
		s.inKernel, s.kernelTyp = true, s.typ
		s.replace, s.force, s.lastErr = false, false, ""
		s.retry.reset()
		delete(e.ipsets.dirty, id)
		if first {
			e.weps.dirtySetUsers(id)
			e.heps.refChanged()
		}
	}
}

// applyIPSetRemovals deletes removed sets that no applied endpoint
// references; the others wait (undefer re-queues them).
func (e *Engine) applyIPSetRemovals(now time.Time, p *pass) {
	for _, id := range e.ipsets.sortedDirty() {
		s := e.ipsets.sets[id]
		if s.present() || !s.retry.due(now) {
			continue
		}
		if !s.inKernel {
			delete(e.ipsets.sets, id)
			delete(e.ipsets.dirty, id)
			continue
		}
		if e.weps.appliedSetRefs[id] > 0 {
			delete(e.ipsets.dirty, id) // deferred, not failed
			continue
		}
		p.did = true
		if err := e.k.RemoveIPSet(id); err != nil {
			s.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
			s.lastErr = err.Error()
			p.fail("ipset", id, err)
			continue
		}
		delete(e.ipsets.sets, id)
		delete(e.ipsets.dirty, id)
	}
}
