package engine

import (
	"reflect"
	"sort"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// hepEntry is one host endpoint.
type hepEntry struct {
	id      string
	spec    *model.HostEndpoint
	stale   bool
	removed bool
	status  string
	reason  string   // why the status is "error" or "down"
	ifaces  []string // the interfaces it bound at the last apply, sorted
	// invalid: the controller's last message for it could not be read
	// (why). It keeps the interfaces it bound and enforces no policy on
	// them (deny, failsafes excepted) until a valid update arrives.
	invalid string
}

// hostEndpointManager holds host endpoints, the node's interfaces (from
// the host link monitor) and what the kernel enforces per interface.
// Binding depends on every host endpoint and every interface at once (the
// wildcard takes what no other binds), and a node has few of both, so one
// dirty flag re-resolves them all; the kernel is written only where the
// result differs from what it enforces.
type hostEndpointManager struct {
	eps   map[string]*hepEntry
	links map[string]model.HostLinkUpdate // present interfaces by name

	// dirty: the binding or a host endpoint's policy may have changed.
	dirty bool
	force bool // resync: re-apply every bound interface
	retry retryState

	// applied is what the kernel enforces per interface, with the IP sets
	// its policy references (counted in weps.appliedSetRefs).
	applied     map[string]*model.Endpoint
	appliedSets map[string][]string
	// bound is the interface -> host endpoint id of the last apply, for
	// Inspect.
	bound map[string]string
	// toHost is the wildcard's ingress policy the kernel applies to
	// workload traffic to the host (ToHostKernel), with its sets;
	// toHostSent: the kernel has been told (nil included).
	toHost     *model.DirectionPolicy
	toHostSets []string
	toHostSent bool
}

func (m *hostEndpointManager) init() {
	m.eps = map[string]*hepEntry{}
	m.links = map[string]model.HostLinkUpdate{}
	m.applied = map[string]*model.Endpoint{}
	m.appliedSets = map[string][]string{}
	m.bound = map[string]string{}
}

func (m *hostEndpointManager) count() int {
	n := 0
	for _, h := range m.eps {
		if !h.removed {
			n++
		}
	}
	return n
}

// live reports whether any host endpoint exists or the kernel enforces
// one: only then do policy, profile, set and link changes concern it.
func (m *hostEndpointManager) live() bool { return len(m.eps) > 0 || len(m.applied) > 0 }

// refChanged: a policy, profile or IP set changed; a host endpoint may
// use it.
func (m *hostEndpointManager) refChanged() {
	if m.live() {
		m.dirty = true
	}
}

// linkChanged: the workload link monitor reports only workload
// interfaces, which host endpoints never bind; host interfaces come from
// the host link monitor (onHostLink).
func (m *hostEndpointManager) linkChanged(string) {}

func (m *hostEndpointManager) markStale() {
	for _, h := range m.eps {
		if !h.removed {
			h.stale = true
		}
	}
}

func (m *hostEndpointManager) sweep() int {
	n := 0
	for _, h := range m.eps {
		if h.stale && !h.removed {
			h.removed, h.stale = true, false
			m.dirty = true
			n++
		}
	}
	return n
}

func (m *hostEndpointManager) markAllForResync() {
	if m.live() {
		m.dirty, m.force = true, true
	}
}

func (m *hostEndpointManager) readyWork(now time.Time) bool { return m.dirty && m.retry.due(now) }
func (m *hostEndpointManager) failing() int                 { return singleFailing(&m.retry) }
func (m *hostEndpointManager) nextRetry() time.Time         { return singleNextRetry(&m.retry) }

func (m *hostEndpointManager) sortedIDs(all bool) []string {
	var ids []string
	for id, h := range m.eps {
		if all || !h.removed {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func (e *Engine) onHostEndpointUpdate(u *model.HostEndpointUpdate) {
	sp := &u.Endpoint
	id := sp.ID
	m := &e.heps
	h := m.eps[id]
	if h != nil && !h.removed && h.invalid == "" && reflect.DeepEqual(h.spec, sp) {
		h.stale = false
		return
	}
	if h == nil {
		h = &hepEntry{id: id}
		m.eps[id] = h
	}
	h.spec, h.stale, h.removed, h.invalid = sp, false, false, ""
	m.dirty = true
	m.retry.reset()
}

// markInvalid records that the controller's message for host endpoint id
// could not be read. A known endpoint keeps its binding and fails closed
// on it; an unknown one binds nothing, but its status says why.
func (m *hostEndpointManager) markInvalid(id, reason string) {
	h := m.eps[id]
	if h == nil {
		h = &hepEntry{id: id, spec: &model.HostEndpoint{ID: id}}
		m.eps[id] = h
	}
	h.invalid, h.stale, h.removed = reason, false, false
	m.dirty = true
	m.retry.reset()
}

func (e *Engine) onHostEndpointRemove(r *model.HostEndpointRemove) {
	if h := e.heps.eps[r.ID]; h != nil && !h.removed {
		h.removed = true
		e.heps.dirty = true
		e.heps.retry.reset()
	}
}

// onHostLink records an interface change from the host link monitor.
func (m *hostEndpointManager) onHostLink(u model.HostLinkUpdate) {
	old, had := m.links[u.Name]
	if u.State == model.LinkAbsent {
		if had {
			delete(m.links, u.Name)
			m.refChanged()
		}
		return
	}
	if had && old.State == u.State && reflect.DeepEqual(old.Addrs, u.Addrs) {
		return
	}
	m.links[u.Name] = u
	m.refChanged()
}
