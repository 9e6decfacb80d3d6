package engine

import (
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Endpoint statuses, as Felix reports them.
const (
	statusUp    = "up"
	statusDown  = "down"
	statusError = "error"
)

// wepEntry is one workload endpoint.
type wepEntry struct {
	id   model.WorkloadID
	name string // id.String(), the order of apply passes

	spec *model.WorkloadEndpoint // nil until a valid update arrives
	// refKey is referenceKey(refKeyOf), kept while the spec stays.
	refKey   string
	refKeyOf *model.WorkloadEndpoint
	specInfo specInfo // for Inspect (snapshot.go)
	invalid  string   // reason the last update was rejected; cleared by a valid one
	stale    bool     // not re-sent yet in the current epoch
	removed  bool     // WorkloadEndpointRemove seen (or swept)

	desired     *model.Endpoint // last resolution, for Inspect
	applied     *model.Endpoint // what the kernel enforces (nil: nothing)
	appliedSets []string

	force       bool // resync: re-apply even if unchanged
	linkChanged bool // the interface changed: re-apply if it is up now
	retry       retryState

	status, reason string
	receivedAt     time.Time // content change not yet "up", for the latency metric
	lastProgrammed time.Time
}

// endpointManager holds workload endpoints and the indexes from policies,
// profiles, IP sets and interfaces to the endpoints that use them.
type endpointManager struct {
	eps map[model.WorkloadID]*wepEntry
	dirtyQueue[model.WorkloadID]

	polUsers  refIndex[model.PolicyKey]
	profUsers refIndex[string]
	setUsers  refIndex[string] // from the last resolution
	byIface   ifaceIndex
	// appliedSetRefs counts applied endpoints per referenced set: a removed
	// set leaves the kernel only when this drops to zero.
	appliedSetRefs map[string]int

	happy        map[model.WorkloadID]struct{}
	counts       map[string]int                // endpoints per status
	touched      map[model.WorkloadID]struct{} // changed since the last publish
	happyTouched map[model.WorkloadID]struct{} // happiness flipped since the last report
}

func (m *endpointManager) init() {
	m.eps = map[model.WorkloadID]*wepEntry{}
	m.dirty = map[model.WorkloadID]struct{}{}
	m.retryOf = func(id model.WorkloadID) *retryState { return &m.eps[id].retry }
	m.polUsers.init()
	m.profUsers.init()
	m.setUsers.init()
	m.byIface.init()
	m.appliedSetRefs = map[string]int{}
	m.happy = map[model.WorkloadID]struct{}{}
	m.counts = map[string]int{}
	m.touched = map[model.WorkloadID]struct{}{}
	m.happyTouched = map[model.WorkloadID]struct{}{}
}

func (m *endpointManager) markDirty(id model.WorkloadID) {
	m.dirty[id] = struct{}{}
	m.touched[id] = struct{}{}
}

func (m *endpointManager) dirtyUsers(users map[model.WorkloadID]struct{}) {
	for id := range users {
		m.markDirty(id)
	}
}

func (m *endpointManager) dirtySetUsers(setID string) { m.dirtyUsers(m.setUsers.users(setID)) }

func (m *endpointManager) linkChanged(iface string) {
	for id := range m.byIface.users(iface) {
		m.eps[id].linkChanged = true
		m.markDirty(id)
	}
}

func (m *endpointManager) entry(id model.WorkloadID) *wepEntry {
	ent := m.eps[id]
	if ent == nil {
		ent = &wepEntry{id: id, name: id.String()}
		m.eps[id] = ent
	}
	return ent
}

func (m *endpointManager) markStale() {
	for _, ent := range m.eps {
		if !ent.removed {
			ent.stale = true
		}
	}
}

func (m *endpointManager) sweep() int {
	n := 0
	for id, ent := range m.eps {
		if ent.stale && !ent.removed {
			ent.removed, ent.stale = true, false
			ent.retry.reset()
			m.markDirty(id)
			n++
		}
	}
	return n
}

func (m *endpointManager) markAllForResync() {
	for id, ent := range m.eps {
		if !ent.removed {
			ent.force = true
			m.markDirty(id)
		}
	}
}

// markInvalid records a rejected update for id: status "error" with the
// reason; what the kernel enforces stays.
func (m *endpointManager) markInvalid(id model.WorkloadID, reason string) {
	ent := m.entry(id)
	ent.invalid = reason
	ent.stale, ent.removed = false, false
	ent.retry.reset()
	m.markDirty(id)
}

// forget drops a removed endpoint from every index.
func (m *endpointManager) forget(id model.WorkloadID) {
	ent := m.eps[id]
	m.setStatusCount(ent, "")
	delete(m.eps, id)
	delete(m.dirty, id)
	m.polUsers.set(id, nil)
	m.profUsers.set(id, nil)
	m.setUsers.set(id, nil)
	m.byIface.set(id, nil)
	m.touched[id] = struct{}{}
}

// setStatusCount moves ent between the per-status counts and the happy set.
func (m *endpointManager) setStatusCount(ent *wepEntry, status string) {
	if ent.status != "" {
		m.counts[ent.status]--
	}
	if status != "" {
		m.counts[status]++
	}
	wasHappy, isHappy := ent.status == statusUp, status == statusUp
	if wasHappy != isHappy {
		if isHappy {
			m.happy[ent.id] = struct{}{}
		} else {
			delete(m.happy, ent.id)
		}
		m.happyTouched[ent.id] = struct{}{}
	}
	ent.status = status
}

// onWorkloadUpdate stores an endpoint. Unchanged content (re-sent in a
// resync) only clears the stale mark: it is not re-applied.
func (e *Engine) onWorkloadUpdate(u *model.WorkloadEndpointUpdate, recv time.Time) {
	sp := &u.Endpoint
	id := sp.ID
	m := &e.weps
	ent := m.entry(id)
	wasLive := !ent.removed
	ent.stale, ent.removed = false, false
	if wasLive && ent.invalid == "" && ent.spec != nil && ent.spec.Equal(sp) {
		// Nothing Inspect shows changed (the stale mark is not shown), so
		// there is nothing to publish either.
		return
	}
	m.touched[id] = struct{}{}
	ent.invalid = ""
	ent.spec = sp
	ent.receivedAt = recv
	ent.retry.reset()
	var pols []model.PolicyKey
	for _, t := range sp.Tiers {
		pols = append(pols, t.Ingress...)
		pols = append(pols, t.Egress...)
	}
	m.polUsers.set(id, pols)
	m.profUsers.set(id, sp.Profiles)
	m.byIface.set(id, []string{sp.Iface})
	m.markDirty(id)
}

func (e *Engine) onWorkloadRemove(r *model.WorkloadEndpointRemove) {
	ent := e.weps.eps[r.ID]
	if ent == nil || ent.removed {
		return
	}
	ent.removed, ent.stale = true, false
	ent.retry.reset()
	e.weps.markDirty(r.ID)
}
