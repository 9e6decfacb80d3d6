package engine

import (
	"reflect"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// serviceManager merges ServiceUpdate (frontends) with the dpd extension
// ServiceBackendsUpdate (backends) into one model.Service per key. Either
// may arrive first; a service is programmed once its ServiceUpdate is known.
type serviceManager struct {
	frontends map[model.ServiceKey]*svcPart[model.Service]
	backends  map[model.ServiceKey]*svcPart[[]model.Backend]
	obj       *objectManager[model.ServiceKey, model.Service]
}

type svcPart[T any] struct {
	v     T
	stale bool
}

func (m *serviceManager) init() {
	m.frontends = map[model.ServiceKey]*svcPart[model.Service]{}
	m.backends = map[model.ServiceKey]*svcPart[[]model.Backend]{}
	m.obj = newObjectManager("service",
		func(a, b *model.Service) bool { return reflect.DeepEqual(a, b) },
		func(k model.ServiceKey) string { return k.Namespace + "/" + k.Name })
}

// recompute sets the merged desired service for k.
func (m *serviceManager) recompute(k model.ServiceKey) {
	f := m.frontends[k]
	if f == nil {
		m.obj.del(k)
		return
	}
	merged := f.v
	merged.Key = k
	if b := m.backends[k]; b != nil {
		merged.Backends = b.v
	}
	m.obj.set(k, &merged)
}

func (m *serviceManager) markStale() {
	for _, f := range m.frontends {
		f.stale = true
	}
	for _, b := range m.backends {
		b.stale = true
	}
}

func (m *serviceManager) sweep() int {
	n := 0
	for k, f := range m.frontends {
		if f.stale {
			delete(m.frontends, k)
			m.recompute(k)
			n++
		}
	}
	for k, b := range m.backends {
		if b.stale {
			delete(m.backends, k)
			m.recompute(k)
			n++
		}
	}
	return n
}

func (e *Engine) onServiceUpdate(u *model.ServiceUpdate) {
	k := u.Service.Key
	e.services.frontends[k] = &svcPart[model.Service]{v: u.Service}
	e.services.recompute(k)
}

func (e *Engine) onServiceRemove(r *model.ServiceRemove) {
	delete(e.services.frontends, r.Key)
	e.services.recompute(r.Key)
}

func (e *Engine) onBackendsUpdate(u *model.ServiceBackendsUpdate) {
	e.services.backends[u.Key] = &svcPart[[]model.Backend]{v: u.Backends}
	e.services.recompute(u.Key)
}

func (e *Engine) onBackendsRemove(r *model.ServiceBackendsRemove) {
	delete(e.services.backends, r.Key)
	e.services.recompute(r.Key)
}
