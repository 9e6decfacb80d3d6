package engine

import (
	"sort"
	"sync"
)

// HostEndpointInfo is the engine's view of one host endpoint, for Inspect.
type HostEndpointInfo struct {
	ID     string
	Name   string // the interface it names; "*" for the wildcard; "" binds by ExpectedIPs
	Expect []string
	Status string // "up", "down", "error"
	Reason string
	// Ifaces are the interfaces it binds (each with its policy enforced
	// when Status is "up").
	Ifaces []string
	Tiers  []string
	// ProfileIDs follow the tiers.
	ProfileIDs []string
}

// hostSnapshot is what Inspect reads of host endpoints, published by the
// loop after each host endpoint pass (before the statuses go out).
type hostSnapshot struct {
	mu   sync.Mutex
	list []HostEndpointInfo // guarded by mu; sorted by id
}

func (e *Engine) publishHosts() {
	m := &e.heps
	var list []HostEndpointInfo
	for _, id := range m.sortedIDs(false) {
		h := m.eps[id]
		info := HostEndpointInfo{ID: id, Name: h.spec.Iface, Status: h.status, Reason: h.reason,
			Ifaces: append([]string(nil), h.ifaces...), ProfileIDs: append([]string(nil), h.spec.Profiles...)}
		for _, a := range h.spec.ExpectedIPv4 {
			info.Expect = append(info.Expect, a.String())
		}
		for _, a := range h.spec.ExpectedIPv6 {
			info.Expect = append(info.Expect, a.String())
		}
		for _, t := range h.spec.Tiers {
			info.Tiers = append(info.Tiers, t.Name)
		}
		list = append(list, info)
	}
	e.hepSnap.mu.Lock()
	e.hepSnap.list = list
	e.hepSnap.mu.Unlock()
}

// HostEndpoints lists every host endpoint, sorted by id.
func (e *Engine) HostEndpoints() []HostEndpointInfo {
	e.hepSnap.mu.Lock()
	defer e.hepSnap.mu.Unlock()
	return append([]HostEndpointInfo(nil), e.hepSnap.list...)
}

// HostEndpoint finds one host endpoint by id.
func (e *Engine) HostEndpoint(id string) (HostEndpointInfo, bool) {
	l := e.HostEndpoints()
	i := sort.Search(len(l), func(i int) bool { return l[i].ID >= id })
	if i < len(l) && l[i].ID == id {
		return l[i], true
	}
	return HostEndpointInfo{}, false
}
