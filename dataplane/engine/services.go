package engine

import (
	"reflect"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
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

func (e *Engine) onServiceUpdate(u *felix.ServiceUpdate) error {
	s, err := felixconv.Service(u)
	if err != nil {
		return err
	}
	k := s.Key
	e.services.frontends[k] = &svcPart[model.Service]{v: s}
	e.services.recompute(k)
	return nil
}

func (e *Engine) onServiceRemove(r *felix.ServiceRemove) error {
	k, err := felixconv.ServiceKey(r.GetNamespace(), r.GetName())
	if err != nil {
		return err
	}
	delete(e.services.frontends, k)
	e.services.recompute(k)
	return nil
}

func (e *Engine) onBackendsUpdate(u *felix.ServiceBackendsUpdate) error {
	bs, err := felixconv.Backends(u)
	if err != nil {
		return err
	}
	k, err := felixconv.ServiceKey(u.GetNamespace(), u.GetName())
	if err != nil {
		return err
	}
	e.services.backends[k] = &svcPart[[]model.Backend]{v: bs}
	e.services.recompute(k)
	return nil
}

func (e *Engine) onBackendsRemove(r *felix.ServiceBackendsRemove) error {
	k, err := felixconv.ServiceKey(r.GetNamespace(), r.GetName())
	if err != nil {
		return err
	}
	delete(e.services.backends, k)
	e.services.recompute(k)
	return nil
}
