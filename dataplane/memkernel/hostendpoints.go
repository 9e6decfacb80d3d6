package memkernel

import (
	"context"
	"maps"
	"slices"
	"sort"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Host endpoint method names, as used by Calls, CallLog, FailNext and Fail.
const (
	MethodApplyHostEndpoint  = "ApplyHostEndpoint"
	MethodRemoveHostEndpoint = "RemoveHostEndpoint"
)

// hostState is the in-memory kernel's host side: the node's interfaces
// with their addresses (declared by SetHostLink) and the host endpoint
// policy enforced per interface.
type hostState struct {
	links    map[string]model.HostLinkUpdate
	enforced map[string]*model.Endpoint // by interface
	watchers map[int]func(model.HostLinkUpdate)
	next     int
	toHost   *model.DirectionPolicy
}

func (h *hostState) init() {
	if h.links == nil {
		h.links = map[string]model.HostLinkUpdate{}
		h.enforced = map[string]*model.Endpoint{}
		h.watchers = map[int]func(model.HostLinkUpdate){}
	}
}

// SetHostLink declares a host interface (State LinkAbsent: it is gone)
// and reports it to every WatchHostLinks caller.
func (k *Kernel) SetHostLink(u model.HostLinkUpdate) {
	k.mu.Lock()
	k.hep.init()
	if u.State == model.LinkAbsent {
		delete(k.hep.links, u.Name)
	} else {
		u.Addrs = slices.Clone(u.Addrs)
		k.hep.links[u.Name] = u
	}
	ws := slices.Collect(maps.Values(k.hep.watchers))
	k.mu.Unlock()
	for _, w := range ws {
		w(u)
	}
}

// HostWatchers reports how many WatchHostLinks calls are active.
func (k *Kernel) HostWatchers() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.hep.watchers)
}

// WatchHostLinks reports every declared host interface, then every
// SetHostLink, until ctx ends.
func (k *Kernel) WatchHostLinks(ctx context.Context, report func(model.HostLinkUpdate)) error {
	k.mu.Lock()
	k.hep.init()
	id := k.hep.next
	k.hep.next++
	k.hep.watchers[id] = report
	initial := slices.Collect(maps.Values(k.hep.links))
	k.mu.Unlock()
	for _, u := range initial {
		report(u)
	}
	<-ctx.Done()
	k.mu.Lock()
	delete(k.hep.watchers, id)
	k.mu.Unlock()
	return nil
}

// ApplyHostEndpoint records ep as enforced on its interface. Applying to
// a workload's interface, or with a policy referencing a set that is not
// programmed, is a violation.
func (k *Kernel) ApplyHostEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.hep.init()
	if err := k.callLocked(MethodApplyHostEndpoint, ep.ID.String()); err != nil {
		return err
	}
	for _, id := range ep.ReferencedSets() {
		if _, ok := k.sets[id]; !ok {
			k.violateLocked("ApplyHostEndpoint %s: references ip set %s that is not programmed", ep.ID, id)
		}
	}
	if id, ok := k.ifaces[ep.Iface]; ok {
		k.violateLocked("ApplyHostEndpoint %s: interface %s is programmed for workload %s", ep.ID, ep.Iface, id)
	}
	cp := *ep
	k.hep.enforced[ep.Iface] = &cp
	return nil
}

// RemoveHostEndpoint forgets what is enforced on ep's interface.
func (k *Kernel) RemoveHostEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.hep.init()
	if err := k.callLocked(MethodRemoveHostEndpoint, ep.ID.String()); err != nil {
		return err
	}
	delete(k.hep.enforced, ep.Iface)
	return nil
}

// HostEnforced returns what is enforced per host interface.
func (k *Kernel) HostEnforced() map[string]*model.Endpoint {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.hep.enforced)
}

// HostBinding returns interface -> host endpoint id of what is enforced.
func (k *Kernel) HostBinding() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]string{}
	for iface, ep := range k.hep.enforced {
		out[iface] = ep.ID.Workload
	}
	return out
}

// HostIfaces lists the interfaces with host endpoint policy, sorted.
func (k *Kernel) HostIfaces() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := slices.Collect(maps.Keys(k.hep.enforced))
	sort.Strings(l)
	return l
}

// MethodApplyToHostPolicy is the name of ApplyToHostPolicy in Calls.
const MethodApplyToHostPolicy = "ApplyToHostPolicy"

// ApplyToHostPolicy records the policy Return applies to workload traffic
// to the host (nil: none).
func (k *Kernel) ApplyToHostPolicy(pol *model.DirectionPolicy) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodApplyToHostPolicy, ""); err != nil {
		return err
	}
	if pol == nil {
		k.hep.toHost = nil
		return nil
	}
	cp := *pol
	k.hep.toHost = &cp
	return nil
}

// ToHostPolicy returns what ApplyToHostPolicy recorded last.
func (k *Kernel) ToHostPolicy() *model.DirectionPolicy {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.hep.toHost
}
