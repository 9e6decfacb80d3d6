package policysync

import (
	"sort"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// Join subscribes a client for workload endpoint id. A client already
// connected for it is disconnected (ErrSuperseded). The new client gets
// the endpoint's full subset (if the controller has sent the endpoint),
// every service account and namespace, and InSync once the controller is
// in sync.
func (p *Processor) Join(id model.WorkloadID) *Subscription {
	p.mu.Lock()
	defer p.mu.Unlock()
	ep := p.eps[id]
	if ep == nil {
		ep = &endpoint{}
		p.eps[id] = ep
	}
	if ep.sub != nil {
		p.disconnectLocked(ep, ErrSuperseded)
	}
	sub := newSubscription(p, id, p.opts.QueueLimit)
	ep.sub = sub
	ep.syncedPolicies = map[model.PolicyKey]bool{}
	ep.syncedProfiles = map[string]bool{}
	ep.syncedSets = map[string]bool{}
	p.met.clientJoined()
	p.syncEndpointLocked(ep)
	for _, k := range sortedKeys(p.accounts) {
		p.sendLocked(ep, &felix.ToDataplane{Payload: &felix.ToDataplane_ServiceAccountUpdate{ServiceAccountUpdate: p.accounts[k].upd}})
	}
	for _, k := range sortedKeys(p.namespaces) {
		p.sendLocked(ep, &felix.ToDataplane{Payload: &felix.ToDataplane_NamespaceUpdate{NamespaceUpdate: p.namespaces[k].upd}})
	}
	if p.inSync {
		p.sendLocked(ep, inSyncMsg())
	}
	return sub
}

// leave detaches sub if it is still its endpoint's client.
func (p *Processor) leave(sub *Subscription) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ep := p.eps[sub.id]
	if ep == nil || ep.sub != sub {
		return
	}
	ep.sub = nil
	p.met.clientLeft("closed")
	if ep.upd == nil {
		delete(p.eps, sub.id) // only the client knew it
	}
}

// disconnectLocked ends the endpoint's client with err.
func (p *Processor) disconnectLocked(ep *endpoint, err error) {
	if ep.sub == nil {
		return
	}
	ep.sub.end(err)
	ep.sub = nil
	p.met.clientLeft(reasonOf(err))
}

// sendLocked queues m for the endpoint's client; a client whose queue
// overflows is disconnected. It reports whether m was queued.
func (p *Processor) sendLocked(ep *endpoint, m *felix.ToDataplane) bool {
	if ep.sub == nil {
		return false
	}
	if !ep.sub.pushLocked(m) {
		ep.sub = nil
		p.met.clientLeft(reasonOf(ErrTooSlow))
		return false
	}
	p.met.sent(m)
	return true
}

func (p *Processor) broadcastLocked(m *felix.ToDataplane) {
	for _, ep := range p.connected() {
		p.sendLocked(ep, m)
	}
}

// connected lists the endpoints with a client, in id order.
func (p *Processor) connected() []*endpoint {
	var ids []model.WorkloadID
	for id, ep := range p.eps {
		if ep.sub != nil {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	out := make([]*endpoint, len(ids))
	for i, id := range ids {
		out[i] = p.eps[id]
	}
	return out
}

// syncEndpointLocked sends the endpoint update with what it needs around it:
// new IP sets, then new policies and profiles, then the endpoint, then
// removals of policies, profiles and IP sets it no longer references.
func (p *Processor) syncEndpointLocked(ep *endpoint) {
	if ep.upd == nil || ep.sub == nil {
		return
	}
	p.sendWithSetsLocked(ep, nil, func() {
		for _, k := range ep.policies() {
			if pol := p.policies[k]; pol != nil && !ep.syncedPolicies[k] {
				p.sendLocked(ep, &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: pol.upd}})
				ep.syncedPolicies[k] = true
			}
		}
		for _, k := range ep.profiles() {
			if pr := p.profiles[k]; pr != nil && !ep.syncedProfiles[k] {
				p.sendLocked(ep, &felix.ToDataplane{Payload: &felix.ToDataplane_ActiveProfileUpdate{ActiveProfileUpdate: pr.upd}})
				ep.syncedProfiles[k] = true
			}
		}
		p.sendLocked(ep, &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: ep.upd}})
		for _, k := range removedKeys(ep.syncedPolicies, ep.policies()) {
			delete(ep.syncedPolicies, k)
			p.sendLocked(ep, &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyRemove{
				ActivePolicyRemove: &felix.ActivePolicyRemove{Id: policyID(k)}}})
		}
		for _, k := range removedKeys(ep.syncedProfiles, ep.profiles()) {
			delete(ep.syncedProfiles, k)
			p.sendLocked(ep, &felix.ToDataplane{Payload: &felix.ToDataplane_ActiveProfileRemove{
				ActiveProfileRemove: &felix.ActiveProfileRemove{Id: &felix.ProfileID{Name: k}}}})
		}
	})
}

// sendWithSetsLocked sends the IP sets ep needs and has not got, then m
// (if any) and whatever middle does, then removes the sets ep no longer
// needs: a set is never removed while something sent still uses it.
func (p *Processor) sendWithSetsLocked(ep *endpoint, m *felix.ToDataplane, middle func()) {
	need := p.neededSetsLocked(ep)
	for _, id := range sortedKeys(need) {
		if !ep.syncedSets[id] {
			p.sendSetLocked(ep, id)
		}
	}
	if m != nil {
		p.sendLocked(ep, m)
	}
	middle()
	for _, id := range sortedKeys(ep.syncedSets) {
		if _, ok := need[id]; !ok {
			delete(ep.syncedSets, id)
			p.sendLocked(ep, &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetRemove{IpsetRemove: &felix.IPSetRemove{Id: id}}})
		}
	}
}

// neededSetsLocked is every known IP set the endpoint's known policies and
// profiles reference.
func (p *Processor) neededSetsLocked(ep *endpoint) map[string]struct{} {
	need := map[string]struct{}{}
	add := func(sets []string) {
		for _, id := range sets {
			if _, ok := p.ipsets[id]; ok {
				need[id] = struct{}{}
			}
		}
	}
	for _, k := range ep.policies() {
		if pol := p.policies[k]; pol != nil {
			add(pol.sets)
		}
	}
	for _, k := range ep.profiles() {
		if pr := p.profiles[k]; pr != nil {
			add(pr.sets)
		}
	}
	return need
}

func (p *Processor) needsSetLocked(ep *endpoint, id string) bool {
	_, ok := p.neededSetsLocked(ep)[id]
	return ok
}

// sendSetLocked sends the whole set, split to fit the message limit.
func (p *Processor) sendSetLocked(ep *endpoint, id string) {
	s := p.ipsets[id]
	members := sortedKeys(s.members)
	for _, m := range splitIPSetUpdate(id, s.typ, members, p.opts.MaxMessageBytes) {
		if !p.sendLocked(ep, m) {
			return
		}
	}
	ep.syncedSets[id] = true
}

// policies lists the policies the endpoint's tiers name, each once, in
// tier order.
func (ep *endpoint) policies() []model.PolicyKey {
	var out []model.PolicyKey
	seen := map[model.PolicyKey]bool{}
	for _, t := range ep.upd.GetEndpoint().GetTiers() {
		for _, ids := range [][]*felix.PolicyID{t.GetIngressPolicies(), t.GetEgressPolicies()} {
			for _, id := range ids {
				k, err := felixconv.PolicyKeyOf(id)
				if err != nil || seen[k] {
					continue
				}
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

func (ep *endpoint) profiles() []string { return ep.upd.GetEndpoint().GetProfileIds() }

func (ep *endpoint) referencesPolicy(k model.PolicyKey) bool {
	if ep.upd == nil {
		return false
	}
	for _, have := range ep.policies() {
		if have == k {
			return true
		}
	}
	return false
}

func (ep *endpoint) referencesProfile(k string) bool {
	if ep.upd == nil {
		return false
	}
	for _, have := range ep.profiles() {
		if have == k {
			return true
		}
	}
	return false
}

// removedKeys lists, sorted by their string form, the keys of synced that
// current no longer contains.
func removedKeys[K comparable](synced map[K]bool, current []K) []K {
	keep := make(map[K]bool, len(current))
	for _, k := range current {
		keep[k] = true
	}
	var out []K
	for k := range synced {
		if !keep[k] {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return keyString(out[i]) < keyString(out[j]) })
	return out
}

func keyString(k any) string {
	if s, ok := k.(interface{ String() string }); ok {
		return s.String()
	}
	return k.(string)
}

func policyID(k model.PolicyKey) *felix.PolicyID {
	return &felix.PolicyID{Name: k.Name, Namespace: k.Namespace, Kind: k.Kind}
}
