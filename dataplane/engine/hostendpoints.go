package engine

import (
	"log/slog"
	"reflect"
	"sort"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// hepEntry is one host endpoint. dpd stores host endpoints and reports
// their status but does not enforce their policy yet.
type hepEntry struct {
	id      string
	spec    *model.HostEndpoint
	stale   bool
	removed bool
	status  string
}

type hostEndpointManager struct {
	eps    map[string]*hepEntry
	dirty  map[string]struct{}
	logged bool // "not yet enforced" was logged
}

func (m *hostEndpointManager) init() {
	m.eps = map[string]*hepEntry{}
	m.dirty = map[string]struct{}{}
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

func (m *hostEndpointManager) linkChanged(iface string) {
	for id, h := range m.eps {
		if h.spec.Iface == iface {
			m.dirty[id] = struct{}{}
		}
	}
}

func (m *hostEndpointManager) markStale() {
	for _, h := range m.eps {
		if !h.removed {
			h.stale = true
		}
	}
}

func (m *hostEndpointManager) sweep() int {
	n := 0
	for id, h := range m.eps {
		if h.stale && !h.removed {
			h.removed, h.stale = true, false
			m.dirty[id] = struct{}{}
			n++
		}
	}
	return n
}

func (m *hostEndpointManager) markAllForResync() {
	for id, h := range m.eps {
		if !h.removed {
			m.dirty[id] = struct{}{}
		}
	}
}

func (m *hostEndpointManager) sortedIDs(all bool) []string {
	var ids []string
	if all {
		for id := range m.eps {
			ids = append(ids, id)
		}
	} else {
		for id := range m.dirty {
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
	logOnce(e.log, &m.logged, "host endpoints are stored and reported but not yet enforced", "first", id)
	h := m.eps[id]
	if h != nil && !h.removed && reflect.DeepEqual(h.spec, sp) {
		h.stale = false
		return
	}
	if h == nil {
		h = &hepEntry{id: id}
		m.eps[id] = h
	}
	h.spec, h.stale, h.removed = sp, false, false
	m.dirty[id] = struct{}{}
}

func (e *Engine) onHostEndpointRemove(r *model.HostEndpointRemove) {
	if h := e.heps.eps[r.ID]; h != nil && !h.removed {
		h.removed = true
		e.heps.dirty[r.ID] = struct{}{}
	}
}

// applyHostEndpoints only evaluates status: "up" when the interface is up
// (or the endpoint names none or "*", all interfaces), else "down".
func (e *Engine) applyHostEndpoints() {
	m := &e.heps
	for _, id := range m.sortedIDs(false) {
		h := m.eps[id]
		delete(m.dirty, id)
		if h.removed {
			delete(m.eps, id)
			e.emitHostRemove(id)
			continue
		}
		st := statusUp
		if name := h.spec.Iface; name != "" && name != "*" && e.k.Link(name) != model.LinkUp {
			st = statusDown
		}
		if st != h.status {
			h.status = st
			e.emitHostStatus(id, h)
		}
	}
}

func logOnce(log *slog.Logger, done *bool, msg string, args ...any) {
	if !*done {
		*done = true
		log.Info(msg, args...)
	}
}
