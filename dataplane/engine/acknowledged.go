package engine

import (
	"log/slog"
	"sync"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// ackStore records which objects of the kinds dpd stores and acknowledges
// but does not enforce yet the controller has sent, by kind and key, so a
// resync sweeps them like everything else, and logs once per kind that it
// is not enforced.
type ackStore struct {
	items  map[model.StoredKind]map[string]bool // key -> stale
	logged map[model.StoredKind]bool

	// Namespace labels, for Inspect (Observe's label filter), which reads
	// them from other goroutines.
	nsMu     sync.Mutex
	nsLabels map[string]map[string]string // guarded by nsMu
}

func (s *ackStore) init() {
	s.items = map[model.StoredKind]map[string]bool{}
	s.logged = map[model.StoredKind]bool{}
	s.nsLabels = map[string]map[string]string{}
}

// putUpdate records u, and a namespace's labels.
func (s *ackStore) putUpdate(u *model.StoredUpdate, log *slog.Logger) {
	s.put(u.Object, u.Key, log)
	if u.Object == model.StoredNamespace {
		s.nsMu.Lock()
		s.nsLabels[u.Key] = u.Labels
		s.nsMu.Unlock()
	}
}

// namespaceLabels are the labels the controller sent for namespace ns.
func (s *ackStore) namespaceLabels(ns string) (map[string]string, bool) {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	l, ok := s.nsLabels[ns]
	return l, ok
}

func (s *ackStore) forgetLabels(kind model.StoredKind, key string) {
	if kind == model.StoredNamespace {
		s.nsMu.Lock()
		delete(s.nsLabels, key)
		s.nsMu.Unlock()
	}
}

func (s *ackStore) put(kind model.StoredKind, key string, log *slog.Logger) {
	if !s.logged[kind] {
		s.logged[kind] = true
		log.Info("message kind is stored but not yet enforced", "kind", kind.String())
	}
	m := s.items[kind]
	if m == nil {
		m = map[string]bool{}
		s.items[kind] = m
	}
	m[key] = false
}

func (s *ackStore) remove(kind model.StoredKind, key string) {
	delete(s.items[kind], key)
	s.forgetLabels(kind, key)
}

// count returns how many objects of kind are stored.
func (s *ackStore) count(kind model.StoredKind) int { return len(s.items[kind]) }

func (s *ackStore) markStale() {
	for _, m := range s.items {
		for k := range m {
			m[k] = true
		}
	}
}

func (s *ackStore) sweep() int {
	n := 0
	for kind, m := range s.items {
		for k, stale := range m {
			if stale {
				delete(m, k)
				s.forgetLabels(kind, k)
				n++
			}
		}
	}
	return n
}
