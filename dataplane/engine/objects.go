package engine

import (
	"sort"
	"time"
)

// objEntry is one route or service: desired and applied values.
type objEntry[V any] struct {
	desired *V // nil: remove from the kernel
	applied *V // what the kernel holds (nil: nothing)
	stale   bool
	force   bool // resync: re-apply even if unchanged
	retry   retryState
	lastErr string
}

// objectManager tracks kernel objects that reference nothing the engine
// manages (routes, services): desired vs applied, written as a difference.
type objectManager[K comparable, V any] struct {
	kind  string
	items map[K]*objEntry[V]
	dirtyQueue[K]
	equal func(a, b *V) bool
	str   func(K) string
}

func newObjectManager[K comparable, V any](kind string, equal func(a, b *V) bool, str func(K) string) *objectManager[K, V] {
	m := &objectManager[K, V]{kind: kind, items: map[K]*objEntry[V]{}, equal: equal, str: str}
	m.dirty = map[K]struct{}{}
	m.retryOf = func(k K) *retryState { return &m.items[k].retry }
	return m
}

// set stores v as desired and reports whether that changed anything.
func (m *objectManager[K, V]) set(k K, v *V) bool {
	ent := m.items[k]
	if ent != nil && ent.desired != nil && m.equal(ent.desired, v) {
		ent.stale = false
		return false
	}
	if ent == nil {
		ent = &objEntry[V]{}
		m.items[k] = ent
	}
	ent.desired, ent.stale = v, false
	ent.retry.reset()
	m.dirty[k] = struct{}{}
	return true
}

// del makes k go away and reports whether it was desired.
func (m *objectManager[K, V]) del(k K) bool {
	ent := m.items[k]
	if ent == nil || ent.desired == nil {
		return false
	}
	ent.desired, ent.stale = nil, false
	ent.retry.reset()
	m.dirty[k] = struct{}{}
	return true
}

func (m *objectManager[K, V]) count() int {
	n := 0
	for _, ent := range m.items {
		if ent.desired != nil {
			n++
		}
	}
	return n
}

func (m *objectManager[K, V]) markStale() {
	for _, ent := range m.items {
		if ent.desired != nil {
			ent.stale = true
		}
	}
}

func (m *objectManager[K, V]) sweep() []K {
	var out []K
	for k, ent := range m.items {
		if ent.stale && ent.desired != nil {
			m.del(k)
			out = append(out, k)
		}
	}
	return out
}

func (m *objectManager[K, V]) markAllForResync() {
	for k, ent := range m.items {
		if ent.desired != nil {
			ent.force = true
			m.dirty[k] = struct{}{}
		}
	}
}

func (m *objectManager[K, V]) sortedDirty() []K {
	keys := make([]K, 0, len(m.dirty))
	for k := range m.dirty {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m.str(keys[i]) < m.str(keys[j]) })
	return keys
}

// applyUpserts writes new and changed objects.
func (m *objectManager[K, V]) applyUpserts(e *Engine, now time.Time, p *pass, apply func(*V) error) {
	for _, k := range m.sortedDirty() {
		ent := m.items[k]
		if ent.desired == nil || !ent.retry.due(now) {
			continue
		}
		if !ent.force && ent.applied != nil && m.equal(ent.applied, ent.desired) {
			delete(m.dirty, k)
			continue
		}
		p.did = true
		if err := apply(ent.desired); err != nil {
			ent.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
			ent.lastErr = err.Error()
			p.fail(m.kind, m.str(k), err)
			continue
		}
		ent.applied, ent.force, ent.lastErr = ent.desired, false, ""
		ent.retry.reset()
		delete(m.dirty, k)
	}
}

// applyRemovals deletes objects no longer desired.
func (m *objectManager[K, V]) applyRemovals(e *Engine, now time.Time, p *pass, remove func(*V) error) {
	for _, k := range m.sortedDirty() {
		ent := m.items[k]
		if ent.desired != nil || !ent.retry.due(now) {
			continue
		}
		if ent.applied != nil {
			p.did = true
			if err := remove(ent.applied); err != nil {
				ent.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
				ent.lastErr = err.Error()
				p.fail(m.kind, m.str(k), err)
				continue
			}
		}
		delete(m.items, k)
		delete(m.dirty, k)
	}
}
