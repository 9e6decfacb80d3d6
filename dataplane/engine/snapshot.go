package engine

import (
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// snapshotStore is what Inspect reads: the loop publishes into it after
// every iteration, readers copy out under mu. Only endpoints that changed
// are re-published, so the cost per iteration follows the change.
type snapshotStore struct {
	mu  sync.Mutex
	eps map[model.WorkloadID]EndpointInfo // guarded by mu
	// byWorkload indexes eps by workload name, so a lookup by name (or a
	// miss) costs a map access, never a walk under mu. Guarded by mu.
	byWorkload map[string]map[model.WorkloadID]struct{}
	status     StatusInfo // guarded by mu; session fields filled on read
}

func (s *snapshotStore) init() {
	s.eps = map[model.WorkloadID]EndpointInfo{}
	s.byWorkload = map[string]map[model.WorkloadID]struct{}{}
}

// putLocked stores info as id's entry, nil removing it.
func (s *snapshotStore) putLocked(id model.WorkloadID, info *EndpointInfo) {
	if info == nil {
		delete(s.eps, id)
		if ids := s.byWorkload[id.Workload]; ids != nil {
			delete(ids, id)
			if len(ids) == 0 {
				delete(s.byWorkload, id.Workload)
			}
		}
		return
	}
	_, had := s.eps[id]
	s.eps[id] = *info
	if had {
		return // indexed by its workload already
	}
	ids := s.byWorkload[id.Workload]
	if ids == nil {
		ids = map[model.WorkloadID]struct{}{}
		s.byWorkload[id.Workload] = ids
	}
	ids[id] = struct{}{}
}

// publish copies changed loop state into the snapshot.
func (e *Engine) publish() {
	m := &e.weps
	// A slice, not a map: a policy change re-publishes every endpoint that
	// uses it, and the map's hashing and a pointer per entry were the bulk
	// of the pass for the members of a large group.
	var infos []publishedInfo
	if len(m.touched) > 0 { // most iterations of a steady stream touch none
		infos = make([]publishedInfo, 0, len(m.touched))
		for id := range m.touched {
			pi := publishedInfo{id: id}
			if ent := m.eps[id]; ent != nil {
				pi.info, pi.present = endpointInfo(ent, m), true
			}
			infos = append(infos, pi)
		}
		clear(m.touched) // keeps its room for the next change of that size
	}
	st := StatusInfo{
		Dataplane:        e.opts.Name,
		ControllerInSync: e.sessInSync,
		DataplaneInSync:  e.loopSess != nil && e.loopSess.dpInSyncSent,
		Endpoints:        len(m.eps),
		Up:               m.counts[statusUp],
		Down:             m.counts[statusDown],
		Errored:          m.counts[statusError],
		Dirty:            len(m.dirty),
		Policies:         e.policies.len(),
		Profiles:         e.profiles.len(),
		IPSets:           e.ipsets.count(),
		Routes:           e.routes.count(),
		Services:         e.services.obj.count(),
		HostEndpoints:    e.heps.count(),
		LastApply:        e.lastApply,
		LastApplyError:   e.lastApplyErr,
	}
	e.snap.mu.Lock()
	defer e.snap.mu.Unlock()
	for i := range infos {
		if pi := &infos[i]; pi.present {
			e.snap.putLocked(pi.id, &pi.info)
		} else {
			e.snap.putLocked(pi.id, nil)
		}
	}
	e.snap.status = st
}

// publishedInfo is one endpoint's entry for the snapshot; present false
// removes it.
type publishedInfo struct {
	id      model.WorkloadID
	info    EndpointInfo
	present bool
}

func endpointInfo(ent *wepEntry, m *endpointManager) EndpointInfo {
	_, dirty := m.dirty[ent.id]
	info := EndpointInfo{
		ID:             ent.id,
		Status:         ent.status,
		Reason:         ent.reason,
		LastProgrammed: ent.lastProgrammed,
		Dirty:          dirty || ent.removed,
	}
	if ent.spec != nil {
		if ent.specInfo.of != ent.spec {
			// Formatted once per spec: a policy change re-publishes every
			// endpoint that uses it. Published slices are never modified.
			si := &ent.specInfo
			si.of = ent.spec
			si.ipv4, si.ipv6 = prefixStrings(ent.spec.IPv4Nets), prefixStrings(ent.spec.IPv6Nets)
			si.profiles = append([]string(nil), ent.spec.Profiles...)
			si.tiers = nil
			for _, t := range ent.spec.Tiers {
				si.tiers = append(si.tiers, t.Name)
			}
		}
		info.Iface = ent.spec.Iface
		info.IPv4Nets, info.IPv6Nets = ent.specInfo.ipv4, ent.specInfo.ipv6
		info.ProfileIDs, info.Tiers = ent.specInfo.profiles, ent.specInfo.tiers
	}
	return info
}

// specInfo is the part of an endpoint's EndpointInfo its spec decides.
type specInfo struct {
	of                          *model.WorkloadEndpoint
	ipv4, ipv6, profiles, tiers []string
}

func prefixStrings(ps []netip.Prefix) []string {
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// Status summarises the engine for Inspect.
func (e *Engine) Status() StatusInfo {
	e.snap.mu.Lock()
	st := e.snap.status
	e.snap.mu.Unlock()
	if st.Dataplane == "" {
		st.Dataplane = e.opts.Name
	}
	st.MessagesReceived = e.received.Load()
	st.InvalidMessages = e.invalid.Load()
	e.mu.Lock()
	if s := e.sess; s != nil {
		st.SessionID, st.SessionPeer, st.SessionSince = s.id, s.peer, s.since
		st.Connected = !s.isClosed()
	}
	e.mu.Unlock()
	return st
}

// Endpoints lists every workload endpoint, sorted by id.
func (e *Engine) Endpoints() []EndpointInfo {
	e.snap.mu.Lock()
	out := make([]EndpointInfo, 0, len(e.snap.eps))
	for _, info := range e.snap.eps {
		out = append(out, info)
	}
	e.snap.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID.String() < out[j].ID.String() })
	return out
}

// Endpoint finds one endpoint by "orch/workload/endpoint" or a unique
// workload id.
func (e *Engine) Endpoint(id string) (EndpointInfo, bool) {
	e.snap.mu.Lock()
	defer e.snap.mu.Unlock()
	// "orch/workload/endpoint": the workload name may hold slashes
	// ("namespace/pod"); the orchestrator and endpoint ids do not.
	if first, last := strings.Index(id, "/"), strings.LastIndex(id, "/"); first >= 0 && last > first {
		wid := model.WorkloadID{Orchestrator: id[:first], Workload: id[first+1 : last], Endpoint: id[last+1:]}
		if info, ok := e.snap.eps[wid]; ok {
			return info, true
		}
	}
	ids := e.snap.byWorkload[id]
	if len(ids) != 1 {
		return EndpointInfo{}, false
	}
	for wid := range ids {
		return e.snap.eps[wid], true
	}
	return EndpointInfo{}, false
}

// NamespaceLabels are the labels the controller sent for namespace ns
// (NamespaceUpdate); Felix sends no workload labels to dataplanes. Safe
// for concurrent use.
func (e *Engine) NamespaceLabels(ns string) (map[string]string, bool) {
	return e.acks.namespaceLabels(ns)
}
