package engine

import (
	"errors"
	"log/slog"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// hepEntry is one host endpoint. dpd stores host endpoints and reports
// their status but does not enforce their policy yet.
type hepEntry struct {
	fid     *felix.HostEndpointID
	raw     *felix.HostEndpoint
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
		if h.raw.GetName() == iface {
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

func (e *Engine) onHostEndpointUpdate(u *felix.HostEndpointUpdate) error {
	id := u.GetId().GetEndpointId()
	if id == "" || u.GetEndpoint() == nil {
		return errors.New("host endpoint update without id or endpoint")
	}
	m := &e.heps
	logOnce(e.log, &m.logged, "host endpoints are stored and reported but not yet enforced", "first", id)
	h := m.eps[id]
	if h != nil && !h.removed && proto.Equal(h.raw, u.GetEndpoint()) {
		h.stale = false
		return nil
	}
	if h == nil {
		h = &hepEntry{}
		m.eps[id] = h
	}
	h.fid, h.raw, h.stale, h.removed = u.GetId(), u.GetEndpoint(), false, false
	m.dirty[id] = struct{}{}
	return nil
}

func (e *Engine) onHostEndpointRemove(r *felix.HostEndpointRemove) error {
	id := r.GetId().GetEndpointId()
	if h := e.heps.eps[id]; h != nil && !h.removed {
		h.removed = true
		e.heps.dirty[id] = struct{}{}
	}
	return nil
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
		if name := h.raw.GetName(); name != "" && name != "*" && e.k.Link(name) != model.LinkUp {
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
