package memkernel

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Method names, as used by Calls, CallLog, FailNext and Fail.
const (
	MethodConfigure      = "Configure"
	MethodEndApply       = "EndApply"
	MethodReplaceIPSet   = "ReplaceIPSet"
	MethodUpdateIPSet    = "UpdateIPSet"
	MethodRemoveIPSet    = "RemoveIPSet"
	MethodLink           = "Link"
	MethodApplyEndpoint  = "ApplyEndpoint"
	MethodRemoveEndpoint = "RemoveEndpoint"
	MethodApplyRoute     = "ApplyRoute"
	MethodRemoveRoute    = "RemoveRoute"
	MethodApplyService   = "ApplyService"
	MethodRemoveService  = "RemoveService"
)

// IPSet is a recorded set: its type and sorted members.
type IPSet struct {
	Type    model.IPSetType
	Members []model.IPSetMember
}

// Call is one recorded kernel call: the method, its main argument (set id,
// endpoint id, route destination, service key) and whether it failed.
type Call struct {
	Method, Arg string
	Failed      bool
}

type memSet struct {
	typ     model.IPSetType
	members map[model.IPSetMember]struct{}
}

// Kernel is the in-memory kernel. The zero value is not usable; call New.
// Every method is safe for concurrent use.
type Kernel struct {
	mu sync.Mutex // guards every field below

	sets      map[string]*memSet
	endpoints map[model.WorkloadID]*model.Endpoint
	ifaces    map[string]model.WorkloadID // the endpoint programmed on each interface
	routes    map[netip.Prefix]model.Route
	services  map[model.ServiceKey]model.Service
	vteps     map[string]model.VTEP
	hosts     map[string]model.HostMetadata
	config    map[string]string

	// links holds states declared by SetLink; other names are linkDefault.
	links       map[string]model.LinkState
	linkDefault model.LinkState
	watchers    map[int]func(model.LinkUpdate)
	nextWatcher int

	calls      map[string]int
	log        []Call
	failNext   map[string][]error
	failAlways map[string]error
	violations []string

	hep hostState // host endpoints and host links (hostendpoints.go)
}

// New returns an empty kernel in which every interface is present and up.
func New() *Kernel {
	return &Kernel{
		sets:        map[string]*memSet{},
		endpoints:   map[model.WorkloadID]*model.Endpoint{},
		ifaces:      map[string]model.WorkloadID{},
		routes:      map[netip.Prefix]model.Route{},
		services:    map[model.ServiceKey]model.Service{},
		vteps:       map[string]model.VTEP{},
		hosts:       map[string]model.HostMetadata{},
		config:      map[string]string{},
		links:       map[string]model.LinkState{},
		linkDefault: model.LinkUp,
		watchers:    map[int]func(model.LinkUpdate){},
		calls:       map[string]int{},
		failNext:    map[string][]error{},
		failAlways:  map[string]error{},
	}
}

// callLocked counts and logs a call and returns the injected failure, if any.
func (k *Kernel) callLocked(method, arg string) error {
	k.calls[method]++
	var err error
	if q := k.failNext[method]; len(q) > 0 {
		err = q[0]
		if len(q) == 1 {
			delete(k.failNext, method)
		} else {
			k.failNext[method] = q[1:]
		}
	} else if e, ok := k.failAlways[method]; ok {
		err = e
	}
	k.log = append(k.log, Call{Method: method, Arg: arg, Failed: err != nil})
	return err
}

func (k *Kernel) violateLocked(format string, args ...any) {
	k.violations = append(k.violations, fmt.Sprintf(format, args...))
}

// Configure records the config.
func (k *Kernel) Configure(cfg map[string]string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodConfigure, ""); err != nil {
		return err
	}
	k.config = make(map[string]string, len(cfg))
	for key, v := range cfg {
		k.config[key] = v
	}
	return nil
}

// EndApply only counts the call.
func (k *Kernel) EndApply() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.callLocked(MethodEndApply, "")
}

// WatchLinks calls report for every SetLink until ctx ends.
func (k *Kernel) WatchLinks(ctx context.Context, report func(model.LinkUpdate)) error {
	k.mu.Lock()
	id := k.nextWatcher
	k.nextWatcher++
	k.watchers[id] = report
	k.mu.Unlock()
	<-ctx.Done()
	k.mu.Lock()
	delete(k.watchers, id)
	k.mu.Unlock()
	return nil
}

// ReplaceIPSet sets the complete membership of a set.
func (k *Kernel) ReplaceIPSet(id string, typ model.IPSetType, members []model.IPSetMember) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodReplaceIPSet, id); err != nil {
		return err
	}
	s := &memSet{typ: typ, members: make(map[model.IPSetMember]struct{}, len(members))}
	for _, m := range members {
		s.members[m] = struct{}{}
	}
	k.sets[id] = s
	return nil
}

// UpdateIPSet applies a delta to a set previously replaced.
func (k *Kernel) UpdateIPSet(id string, added, removed []model.IPSetMember) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodUpdateIPSet, id); err != nil {
		return err
	}
	s, ok := k.sets[id]
	if !ok {
		k.violateLocked("UpdateIPSet %s: set not programmed", id)
		return fmt.Errorf("update ip set %s: not programmed", id)
	}
	for _, m := range removed {
		delete(s.members, m)
	}
	for _, m := range added {
		s.members[m] = struct{}{}
	}
	return nil
}

// RemoveIPSet deletes a set. Removing a set that a recorded endpoint still
// references is recorded as a violation of the dependency order.
func (k *Kernel) RemoveIPSet(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodRemoveIPSet, id); err != nil {
		return err
	}
	for _, ep := range k.endpoints {
		if slices.Contains(ep.ReferencedSets(), id) {
			k.violateLocked("RemoveIPSet %s: still referenced by endpoint %s", id, ep.ID)
		}
	}
	delete(k.sets, id)
	return nil
}

// Link reports the declared state of name (default: up).
func (k *Kernel) Link(name string) model.LinkState {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls[MethodLink]++
	if st, ok := k.links[name]; ok {
		return st
	}
	return k.linkDefault
}

// ApplyEndpoint records ep. Applying an endpoint whose policy references a
// set that is not programmed, or onto an interface programmed for another
// endpoint, is recorded as a violation.
func (k *Kernel) ApplyEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodApplyEndpoint, ep.ID.String()); err != nil {
		return err
	}
	for _, id := range ep.ReferencedSets() {
		if _, ok := k.sets[id]; !ok {
			k.violateLocked("ApplyEndpoint %s: references ip set %s that is not programmed", ep.ID, id)
		}
	}
	if id, ok := k.ifaces[ep.Iface]; ok && id != ep.ID {
		k.violateLocked("ApplyEndpoint %s: interface %s is programmed for %s", ep.ID, ep.Iface, id)
	}
	if old := k.endpoints[ep.ID]; old != nil && k.ifaces[old.Iface] == ep.ID {
		delete(k.ifaces, old.Iface)
	}
	cp := *ep
	k.endpoints[ep.ID] = &cp
	k.ifaces[ep.Iface] = ep.ID
	return nil
}

// RemoveEndpoint forgets ep.
func (k *Kernel) RemoveEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodRemoveEndpoint, ep.ID.String()); err != nil {
		return err
	}
	if old := k.endpoints[ep.ID]; old != nil && k.ifaces[old.Iface] == ep.ID {
		delete(k.ifaces, old.Iface)
	}
	delete(k.endpoints, ep.ID)
	return nil
}

// ApplyRoute records r.
func (k *Kernel) ApplyRoute(r *model.Route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodApplyRoute, r.Dst.String()); err != nil {
		return err
	}
	k.routes[r.Dst] = *r
	return nil
}

// RemoveRoute forgets r.
func (k *Kernel) RemoveRoute(r *model.Route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodRemoveRoute, r.Dst.String()); err != nil {
		return err
	}
	delete(k.routes, r.Dst)
	return nil
}

// ApplyService records s.
func (k *Kernel) ApplyService(s *model.Service) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodApplyService, s.Key.Namespace+"/"+s.Key.Name); err != nil {
		return err
	}
	k.services[s.Key] = *s
	return nil
}

// RemoveService forgets s.
func (k *Kernel) RemoveService(s *model.Service) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.callLocked(MethodRemoveService, s.Key.Namespace+"/"+s.Key.Name); err != nil {
		return err
	}
	delete(k.services, s.Key)
	return nil
}
