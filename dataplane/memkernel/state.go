package memkernel

import (
	"net/netip"
	"sort"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// IPSet returns the recorded set id.
func (k *Kernel) IPSet(id string) (IPSet, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.sets[id]
	if !ok {
		return IPSet{}, false
	}
	return IPSet{Type: s.typ, Members: model.SortedMembers(s.members)}, true
}

// IPSets returns every recorded set by id.
func (k *Kernel) IPSets() map[string]IPSet {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]IPSet, len(k.sets))
	for id, s := range k.sets {
		out[id] = IPSet{Type: s.typ, Members: model.SortedMembers(s.members)}
	}
	return out
}

// Endpoint returns the recorded endpoint id.
func (k *Kernel) Endpoint(id model.WorkloadID) (*model.Endpoint, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ep, ok := k.endpoints[id]
	return ep, ok
}

// Endpoints returns every recorded endpoint, sorted by id.
func (k *Kernel) Endpoints() []*model.Endpoint {
	k.mu.Lock()
	defer k.mu.Unlock()
	return sortedValues(k.endpoints, func(ep *model.Endpoint) string { return ep.ID.String() })
}

// Routes returns every recorded route, sorted by destination.
func (k *Kernel) Routes() []model.Route {
	k.mu.Lock()
	defer k.mu.Unlock()
	return sortedValues(k.routes, func(r model.Route) string { return r.Dst.String() })
}

// Route returns the recorded route to dst.
func (k *Kernel) Route(dst netip.Prefix) (model.Route, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.routes[dst]
	return r, ok
}

// Services returns every recorded service, sorted by key.
func (k *Kernel) Services() []model.Service {
	k.mu.Lock()
	defer k.mu.Unlock()
	return sortedValues(k.services, func(s model.Service) string { return s.Key.Namespace + "/" + s.Key.Name })
}

// Service returns the recorded service key.
func (k *Kernel) Service(key model.ServiceKey) (model.Service, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.services[key]
	return s, ok
}

// Config returns a copy of the last configuration.
func (k *Kernel) Config() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]string, len(k.config))
	for key, v := range k.config {
		out[key] = v
	}
	return out
}

// Calls returns how often each method was called (failed calls included).
func (k *Kernel) Calls() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int, len(k.calls))
	for m, n := range k.calls {
		out[m] = n
	}
	return out
}

// CallLog returns every call except Link, in order.
func (k *Kernel) CallLog() []Call {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Call(nil), k.log...)
}

// ResetCalls clears the counters and the call log; state is kept.
func (k *Kernel) ResetCalls() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = map[string]int{}
	k.log = nil
}

// Violations lists dependency-order violations seen so far: an endpoint
// applied while a set it references was missing, a set removed while an
// endpoint still referenced it, a delta to a set never replaced.
func (k *Kernel) Violations() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.violations...)
}

// String summarises the recorded state, for test failure messages.
func (k *Kernel) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b strings.Builder
	b.WriteString("memkernel{sets:")
	for _, id := range sortedKeys(k.sets) {
		b.WriteString(" " + id)
	}
	b.WriteString(" endpoints:")
	for id := range k.endpoints {
		b.WriteString(" " + id.String())
	}
	b.WriteString("}")
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for key := range m {
		out = append(out, key)
	}
	sort.Strings(out)
	return out
}

// sortedValues returns m's values ordered by key(v); keys are unique.
func sortedValues[K comparable, V any](m map[K]V, key func(V) string) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
	return out
}
