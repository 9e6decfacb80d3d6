package engine

import (
	"slices"
	"strings"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// sortedDirty lists the dirty endpoints in the order of their names.
func (m *endpointManager) sortedDirty() []model.WorkloadID {
	return m.sortedDirtyWhere(nil)
}

// sortedDirtyWhere lists the dirty endpoints that keep accepts (all for
// nil) in the order of their names, which each entry keeps.
func (m *endpointManager) sortedDirtyWhere(keep func(*wepEntry) bool) []model.WorkloadID {
	l := make([]*wepEntry, 0, len(m.dirty))
	for id := range m.dirty {
		ent := m.eps[id]
		if ent == nil || (keep != nil && !keep(ent)) {
			continue
		}
		if ent.name == "" {
			ent.name = id.String()
		}
		l = append(l, ent)
	}
	slices.SortFunc(l, func(a, b *wepEntry) int { return strings.Compare(a.name, b.name) })
	ids := make([]model.WorkloadID, len(l))
	for i := range l {
		ids[i] = l[i].id
	}
	return ids
}

// applyEndpointRemovals removes endpoints that went away. It runs before
// any upsert, so a re-used interface is cleared before its new owner is
// programmed, and before set removals, so no applied policy references a
// removed set.
func (e *Engine) applyEndpointRemovals(now time.Time, p *pass) {
	m := &e.weps
	for _, id := range m.sortedDirtyWhere(func(ent *wepEntry) bool { return ent.removed }) {
		ent := m.eps[id]
		if !ent.retry.due(now) {
			continue
		}
		if ent.applied != nil {
			p.did = true
			if err := e.k.RemoveEndpoint(ent.applied); err != nil {
				ent.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
				ent.reason = "remove: " + err.Error()
				p.fail("endpoint", id.String(), err)
				continue
			}
			e.setApplied(ent, nil, nil)
		}
		m.evaluatedOn(id, "")
		m.forget(id)
		e.emitWorkloadRemove(ent)
	}
}

// applyEndpointUpserts evaluates every dirty endpoint that is due. The
// kernel may first prepare the policies of those that will be applied all
// at once (PolicyPreloader): loading programs in parallel beats one at a
// time inside each ApplyEndpoint.
//
// When a change reaches programmed endpoints that share their policy
// references (a policy group), one member of each group goes first: the
// kernel switches a group's shared jump slot with its first member, so
// every member enforces the change after one resolve and one load, not
// after the whole pass has resolved each of them.
func (e *Engine) applyEndpointUpserts(now time.Time, p *pass) {
	e.resolved = map[string]*resolution{}
	defer func() { e.resolved = nil }()
	if leaders := e.groupLeaders(now); len(leaders) > 0 {
		e.evalEndpoints(leaders, now, p, "leaders_")
		p.phase("leaders_apply")
	}
	due := e.dueEndpoints(now) // without the leaders, applied and clean now
	e.evalEndpoints(due, now, p, "")
	// An interface let go of in this pass (its holder moved) goes to the
	// next endpoint naming it in the same pass: those are dirty and due
	// now, as nothing else is after the loop above.
	for round := 0; ; round++ {
		due = due[:0]
		for _, id := range e.weps.sortedDirty() {
			if ent := e.weps.eps[id]; !ent.removed && ent.retry.due(now) {
				due = append(due, ent)
			}
		}
		if len(due) == 0 {
			return
		}
		if round == 3 {
			e.nudge() // the next loop iteration goes on
			return
		}
		for _, ent := range due {
			e.evalEndpoint(ent, now, p)
		}
	}
}

// evalEndpoints preloads the changed policies of due (when the kernel
// preloads), then evaluates each in order. The pass log names the phases
// with prefix.
func (e *Engine) evalEndpoints(due []*wepEntry, now time.Time, p *pass, prefix string) {
	if pre, ok := e.k.(PolicyPreloader); ok {
		eps := e.endpointsToApply(due)
		p.phase(prefix + "resolve")
		if len(eps) > 0 {
			pre.PreloadPolicies(eps)
		}
		p.phase(prefix + "preload")
	}
	for _, ent := range due {
		e.evalEndpoint(ent, now, p)
	}
}

// groupLeaders is, for each policy group with more than one due member,
// the member that comes first in apply order, found in one walk of the
// dirty set (before any sort, which a thousand members make the larger
// cost). Only endpoints programmed on their interface already lead: they
// hold it, so going first changes no claim on an interface.
func (e *Engine) groupLeaders(now time.Time) []*wepEntry {
	m := &e.weps
	type group struct {
		first   *wepEntry
		members int
	}
	groups := map[string]*group{}
	for id := range m.dirty {
		ent := m.eps[id]
		if ent == nil || ent.removed || !ent.retry.due(now) || !canLead(ent) {
			continue
		}
		if ent.name == "" {
			ent.name = id.String()
		}
		g := groups[ent.refKey]
		if g == nil {
			g = &group{}
			groups[ent.refKey] = g
		}
		g.members++
		if g.first == nil || ent.name < g.first.name {
			g.first = ent
		}
	}
	var leaders []*wepEntry
	for _, g := range groups {
		if g.members > 1 {
			leaders = append(leaders, g.first)
		}
	}
	slices.SortFunc(leaders, func(a, b *wepEntry) int { return strings.Compare(a.name, b.name) })
	return leaders
}

// canLead: ent is programmed, valid, on the interface it names, and its
// reference key is current.
func canLead(ent *wepEntry) bool {
	return ent.invalid == "" && ent.spec != nil && ent.applied != nil && ent.refKeyOf == ent.spec &&
		ent.applied.Iface == ent.spec.Iface && ent.applied.PolicyGroup == ent.refKey &&
		ent.applied.PreviewIngress == nil && ent.applied.PreviewEgress == nil // previews: a slot of its own
}

// dueEndpoints is the dirty endpoints whose retry is due, in apply order.
func (e *Engine) dueEndpoints(now time.Time) []*wepEntry {
	var due []*wepEntry
	for _, id := range e.weps.sortedDirty() {
		if ent := e.weps.eps[id]; !ent.removed && ent.retry.due(now) {
			due = append(due, ent)
		}
	}
	return due
}

// endpointsToApply resolves the valid, complete entries of due that their
// evaluation will apply (mustApply).
func (e *Engine) endpointsToApply(due []*wepEntry) []*model.Endpoint {
	var eps []*model.Endpoint
	for _, ent := range due {
		if ent.invalid != "" || ent.spec == nil {
			continue
		}
		if desired, _, missing := e.resolve(ent); missing == "" && mustApply(ent, desired, e.k.Link(ent.spec.Iface)) {
			eps = append(eps, desired)
		}
	}
	return eps
}

// mustApply reports whether evaluating ent, whose interface is in state
// link, applies desired to the kernel. The preload asks the evaluation's
// question: an endpoint recorded before its interface existed is applied
// again, with its policy programs, once the interface is up, and those
// loads belong in the preload, not one after the other in ApplyEndpoint.
func mustApply(ent *wepEntry, desired *model.Endpoint, link model.LinkState) bool {
	return ent.force || ent.applied == nil || (ent.linkChanged && link == model.LinkUp) || !sameEndpoint(desired, ent.applied)
}

// adoptPinned hands a kernel enforcing with programs an earlier process
// left (PinnedPolicyAdopter) the endpoints this pass will apply, before
// the pass changes IP sets.
func (e *Engine) adoptPinned(now time.Time, p *pass) {
	pa, ok := e.k.(PinnedPolicyAdopter)
	if !ok || len(e.ipsets.dirty) == 0 || !pa.UnclaimedPinnedPolicies() {
		return
	}
	e.resolved = map[string]*resolution{}
	defer func() { e.resolved = nil }()
	if eps := e.endpointsToApply(e.dueEndpoints(now)); len(eps) > 0 {
		pa.AdoptPinnedPolicies(eps)
	}
	p.phase("adopt_pinned")
}

// evalEndpoint resolves ent, applies it if the kernel's copy differs (or a
// resync or link change asks for it) and sets its status. An endpoint that
// is invalid or references something missing keeps whatever the kernel
// enforces and waits: the index re-queues it when the reference arrives.
func (e *Engine) evalEndpoint(ent *wepEntry, now time.Time, p *pass) {
	m := &e.weps
	settle := func() {
		ent.force, ent.linkChanged = false, false
		ent.retry.reset()
		delete(m.dirty, ent.id)
	}
	if ent.invalid != "" || ent.spec == nil {
		if !e.failClosed(ent, now, p) {
			return // stays dirty; retried after the backoff
		}
		e.setStatus(ent, statusError, "invalid: "+ent.invalid)
		settle()
		return
	}
	desired, sets, missing := e.resolve(ent)
	m.setUsers.set(ent.id, sets)
	ent.desired = desired
	m.evaluatedOn(ent.id, desired.Iface)
	if holder, taken := m.ifaceHolder(ent.id, desired.Iface); taken {
		// Programmed on another interface before: not any more.
		if ent.applied != nil {
			p.did = true
			if err := e.k.RemoveEndpoint(ent.applied); err != nil {
				ent.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
				p.fail("endpoint", ent.id.String(), err)
				e.setStatus(ent, statusError, "remove: "+err.Error())
				return // stays dirty; retried after the backoff
			}
			e.setApplied(ent, nil, nil)
		}
		e.setStatus(ent, statusError, "interface "+desired.Iface+" is held by endpoint "+holder.String())
		settle()
		return
	}
	if missing != "" {
		e.setStatus(ent, statusError, missing)
		settle()
		return
	}
	for _, s := range sets {
		if !e.ipsets.programmed(s) {
			e.setStatus(ent, statusError, "ip set "+s+" is not programmed yet")
			settle()
			return
		}
	}
	link := e.k.Link(ent.spec.Iface)
	if mustApply(ent, desired, link) {
		p.did = true
		if err := e.k.ApplyEndpoint(desired); err != nil {
			ent.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
			p.fail("endpoint", ent.id.String(), err)
			e.setStatus(ent, statusError, "apply: "+err.Error())
			return // stays dirty; retried after the backoff
		}
		e.setApplied(ent, desired, sets)
		ent.lastProgrammed = now
	}
	settle()
	if why := e.invalidRefs(ent.spec.Tiers, ent.spec.Profiles); why != "" {
		e.setStatus(ent, statusError, why)
		return
	}
	if link != model.LinkUp {
		e.setStatus(ent, statusDown, "interface "+ent.spec.Iface+" is "+link.String())
		return
	}
	e.setStatus(ent, statusUp, "")
	if !ent.receivedAt.IsZero() {
		// Up now, not at the pass's start: the apply is part of it.
		e.met.latency.Observe(e.now().Sub(ent.receivedAt).Seconds())
		ent.receivedAt = time.Time{}
	}
}

// failClosed makes an endpoint whose last update was rejected drop all its
// traffic: what the kernel enforced for it came from an older update and
// may allow what the rejected one no longer does. The interface stays as
// it was (no tiers and no profiles: everything drops), so the next valid
// update is one policy swap. It reports false when the kernel refused.
func (e *Engine) failClosed(ent *wepEntry, now time.Time, p *pass) bool {
	if ent.applied == nil {
		return true // nothing programmed: the interface drops already
	}
	closed := *ent.applied
	closed.Ingress, closed.Egress = model.DirectionPolicy{}.WithDigest(), model.DirectionPolicy{}.WithDigest()
	// Its own: the rest of its group still enforces the group's policy.
	closed.PolicyGroup = ""
	if sameEndpoint(&closed, ent.applied) {
		return true
	}
	p.did = true
	if err := e.k.ApplyEndpoint(&closed); err != nil {
		ent.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
		p.fail("endpoint", ent.id.String(), err)
		e.setStatus(ent, statusError, "invalid: "+ent.invalid+"; failing closed: "+err.Error())
		return false
	}
	e.setApplied(ent, &closed, nil)
	return true
}

// setApplied records what the kernel now enforces for ent and keeps the
// per-set reference counts that hold back set removals.
func (e *Engine) setApplied(ent *wepEntry, ep *model.Endpoint, sets []string) {
	m := &e.weps
	m.appliedOn(ent.id, ent.applied, ep)
	for _, s := range sets {
		m.appliedSetRefs[s]++
	}
	for _, s := range ent.appliedSets {
		m.appliedSetRefs[s]--
		if m.appliedSetRefs[s] <= 0 {
			delete(m.appliedSetRefs, s)
			e.ipsets.undefer(s)
		}
	}
	ent.applied, ent.appliedSets = ep, sets
}

// setStatus updates ent's status and reason; a change of status (not of
// reason alone) is reported to the session.
func (e *Engine) setStatus(ent *wepEntry, status, reason string) {
	ent.reason = reason
	e.weps.touched[ent.id] = struct{}{}
	if ent.status == status {
		return
	}
	e.weps.setStatusCount(ent, status)
	e.emitWorkloadStatus(ent)
}
