package dataplane

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/dpd-dev/dpd/dataplane/felixconv"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// ipsetEntry is one IP set: desired membership plus what the kernel holds.
// When the set is clean, members is exactly the kernel's content, so a
// delta needs no second copy: changed remembers, for each member touched
// since the last apply, whether the kernel had it.
type ipsetEntry struct {
	typ     model.IPSetType
	members map[model.IPSetMember]struct{}
	stale   bool // not re-sent yet in the current epoch
	removed bool // IPSetRemove seen; the kernel copy goes once unreferenced

	inKernel  bool // the kernel holds the set
	kernelTyp model.IPSetType
	replace   bool // the next apply must ReplaceIPSet
	force     bool // resync: replace even if clean
	changed   map[model.IPSetMember]bool
	retry     retryState
	lastErr   string
}

func (s *ipsetEntry) present() bool { return !s.removed }

// noteChange records that m is about to flip; had says whether it is a
// member now. Only needed when the next apply is a delta.
func (s *ipsetEntry) noteChange(m model.IPSetMember, had bool) {
	if s.replace || !s.inKernel {
		return
	}
	if s.changed == nil {
		s.changed = map[model.IPSetMember]bool{}
	}
	if _, seen := s.changed[m]; !seen {
		s.changed[m] = had
	}
}

// ipsetManager holds every IP set. Sets are applied before endpoints and
// removed after them; a removed set stays in the kernel while an applied
// endpoint still references it.
type ipsetManager struct {
	sets  map[string]*ipsetEntry
	dirty map[string]struct{}
}

func (m *ipsetManager) init() {
	m.sets = map[string]*ipsetEntry{}
	m.dirty = map[string]struct{}{}
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
	s, ok := m.sets[id]
	if ok && s.present() && s.typ == typ && sameMembers(s.members, members) {
		s.stale = false
		return false
	}
	appeared = !ok || !s.present()
	if !ok {
		s = &ipsetEntry{}
		m.sets[id] = s
	}
	s.typ = typ
	s.members = make(map[model.IPSetMember]struct{}, len(members))
	for _, mem := range members {
		s.members[mem] = struct{}{}
	}
	s.stale, s.removed, s.replace, s.changed = false, false, true, nil
	s.retry.reset()
	m.dirty[id] = struct{}{}
	return appeared
}

func sameMembers(have map[model.IPSetMember]struct{}, want []model.IPSetMember) bool {
	seen := 0
	for _, mem := range want {
		if _, ok := have[mem]; !ok {
			return false
		}
		seen++
	}
	// Duplicates in want could make seen exceed the distinct count.
	if seen == len(have) {
		return true
	}
	distinct := make(map[model.IPSetMember]struct{}, len(want))
	for _, mem := range want {
		distinct[mem] = struct{}{}
	}
	return len(distinct) == len(have)
}

// delta applies added/removed members to a present set.
func (m *ipsetManager) delta(id string, added, removed []model.IPSetMember) {
	s := m.sets[id]
	dirty := false
	for _, mem := range removed {
		if _, had := s.members[mem]; had {
			s.noteChange(mem, true)
			delete(s.members, mem)
			dirty = true
		}
	}
	for _, mem := range added {
		if _, had := s.members[mem]; !had {
			s.noteChange(mem, false)
			s.members[mem] = struct{}{}
			dirty = true
		}
	}
	if dirty {
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

func (m *ipsetManager) readyWork(now time.Time) bool {
	for id := range m.dirty {
		if m.sets[id].retry.due(now) {
			return true
		}
	}
	return false
}

func (m *ipsetManager) nextRetry() (next time.Time) {
	for id := range m.dirty {
		if r := m.sets[id].retry; r.failing() {
			next = earliest(next, r.at)
		}
	}
	return next
}

func (m *ipsetManager) failing() (n int) {
	for id := range m.dirty {
		if m.sets[id].retry.failing() {
			n++
		}
	}
	return n
}

// onIPSetUpdate parses and stores a full set.
func (e *Engine) onIPSetUpdate(u *felix.IPSetUpdate) error {
	if u.GetId() == "" {
		return errors.New("ip set update without id")
	}
	members, err := felixconv.IPSetMembers(u.GetType(), u.GetMembers())
	if err != nil {
		return fmt.Errorf("ip set %s: %w", u.GetId(), err)
	}
	typ := model.IPSetType(u.GetType())
	old := e.ipsets.sets[u.GetId()]
	typeChanged := old != nil && old.present() && old.typ != typ
	if e.ipsets.update(u.GetId(), typ, members) || typeChanged {
		e.weps.dirtySetUsers(u.GetId())
	}
	return nil
}

// onIPSetDelta applies a delta to a known set.
func (e *Engine) onIPSetDelta(u *felix.IPSetDeltaUpdate) error {
	s := e.ipsets.sets[u.GetId()]
	if s == nil || !s.present() {
		return fmt.Errorf("ip set delta for unknown set %q", u.GetId())
	}
	ft := felix.IPSetUpdate_IPSetType(s.typ)
	added, err := felixconv.IPSetMembers(ft, u.GetAddedMembers())
	if err != nil {
		return fmt.Errorf("ip set %s added: %w", u.GetId(), err)
	}
	removed, err := felixconv.IPSetMembers(ft, u.GetRemovedMembers())
	if err != nil {
		return fmt.Errorf("ip set %s removed: %w", u.GetId(), err)
	}
	s.stale = false
	e.ipsets.delta(u.GetId(), added, removed)
	return nil
}

func (e *Engine) onIPSetRemove(r *felix.IPSetRemove) error {
	if e.ipsets.remove(r.GetId()) {
		e.weps.dirtySetUsers(r.GetId())
	}
	return nil
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
		if s.force || s.replace || !s.inKernel || s.kernelTyp != s.typ {
			err = e.k.ReplaceIPSet(id, s.typ, model.SortedMembers(s.members))
		} else {
			added, removed := s.pendingDelta()
			if len(added) == 0 && len(removed) == 0 {
				s.changed = nil
				delete(e.ipsets.dirty, id)
				continue
			}
			err = e.k.UpdateIPSet(id, added, removed)
		}
		p.did = true
		if err != nil {
			s.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
			s.lastErr = err.Error()
			p.fail("ipset", id, err)
			continue
		}
		first := !s.inKernel
		s.inKernel, s.kernelTyp = true, s.typ
		s.replace, s.force, s.changed, s.lastErr = false, false, nil, ""
		s.retry.reset()
		delete(e.ipsets.dirty, id)
		if first {
			e.weps.dirtySetUsers(id)
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

// pendingDelta turns changed into the kernel delta.
func (s *ipsetEntry) pendingDelta() (added, removed []model.IPSetMember) {
	for mem, had := range s.changed {
		_, has := s.members[mem]
		switch {
		case has && !had:
			added = append(added, mem)
		case had && !has:
			removed = append(removed, mem)
		}
	}
	model.SortMembers(added)
	model.SortMembers(removed)
	return added, removed
}
