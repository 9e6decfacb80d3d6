package policysync

import (
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// Options configure a Processor.
type Options struct {
	Log *slog.Logger
	// QueueLimit bounds each client's queue in messages (default 10000).
	QueueLimit int
	// MaxMessageBytes bounds each message sent (default MaxMessageBytes).
	MaxMessageBytes int
	Metrics         *Metrics // nil: not counted
	// Encoding is the generation clients are served in (default: the
	// controller's).
	Encoding Encoding
}

// Processor mirrors what the controller sent that policy-sync clients need
// and feeds each subscribed workload its subset. OnUpdate is called in the
// order the controller's messages were accepted; Join and Leave come from
// client connections. One lock orders it all.
type Processor struct {
	opts Options
	log  *slog.Logger
	met  *Metrics

	ctrlLegacy atomic.Bool // the controller speaks v3.28-v3.31

	mu         sync.Mutex
	inSync     bool // some controller session sent InSync; guarded by mu
	epochOpen  bool // a new session has not sent InSync yet; guarded by mu
	eps        map[model.WorkloadID]*endpoint
	policies   map[model.PolicyKey]*rulesEntry[*felix.ActivePolicyUpdate]
	profiles   map[string]*rulesEntry[*felix.ActiveProfileUpdate]
	ipsets     map[string]*ipsetEntry
	accounts   map[string]*kept[*felix.ServiceAccountUpdate]
	namespaces map[string]*kept[*felix.NamespaceUpdate]
}

// endpoint is one workload endpoint, known from the controller, from a
// client that joined before it was known, or both.
type endpoint struct {
	upd   *felix.WorkloadEndpointUpdate // nil until the controller sends it
	stale bool
	sub   *Subscription // the connected client, if any
	// What the client has been sent.
	syncedPolicies map[model.PolicyKey]bool
	syncedProfiles map[string]bool
	syncedSets     map[string]bool
}

type rulesEntry[T proto.Message] struct {
	upd   T
	sets  []string // IP sets the rules reference
	stale bool
}

type ipsetEntry struct {
	typ     felix.IPSetUpdate_IPSetType
	members map[string]struct{}
	stale   bool
}

type kept[T proto.Message] struct {
	upd   T
	stale bool
}

// NewProcessor returns an empty processor.
func NewProcessor(opts Options) *Processor {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.QueueLimit <= 0 {
		opts.QueueLimit = 10000
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = MaxMessageBytes
	}
	return &Processor{
		opts: opts, log: opts.Log, met: opts.Metrics,
		eps:        map[model.WorkloadID]*endpoint{},
		policies:   map[model.PolicyKey]*rulesEntry[*felix.ActivePolicyUpdate]{},
		profiles:   map[string]*rulesEntry[*felix.ActiveProfileUpdate]{},
		ipsets:     map[string]*ipsetEntry{},
		accounts:   map[string]*kept[*felix.ServiceAccountUpdate]{},
		namespaces: map[string]*kept[*felix.NamespaceUpdate]{},
	}
}

// StartEpoch begins a new controller session: everything known is stale
// until re-sent; what is still stale at its InSync is removed (and clients
// are told). Re-sent unchanged state is not sent to clients again.
func (p *Processor) StartEpoch() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epochOpen = true
	for _, ep := range p.eps {
		if ep.upd != nil {
			ep.stale = true
		}
	}
	for _, e := range p.policies {
		e.stale = true
	}
	for _, e := range p.profiles {
		e.stale = true
	}
	for _, e := range p.ipsets {
		e.stale = true
	}
	for _, e := range p.accounts {
		e.stale = true
	}
	for _, e := range p.namespaces {
		e.stale = true
	}
}

// OnUpdate takes one accepted controller message. Messages policy-sync
// clients do not need are ignored.
func (p *Processor) OnUpdate(m *felix.ToDataplane) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch u := m.GetPayload().(type) {
	case *felix.ToDataplane_InSync:
		p.onInSync()
	case *felix.ToDataplane_WorkloadEndpointUpdate:
		p.onEndpointUpdate(u.WorkloadEndpointUpdate)
	case *felix.ToDataplane_WorkloadEndpointRemove:
		if id, err := felixconv.Endpoint(u.WorkloadEndpointRemove.GetId()); err == nil {
			p.removeEndpoint(id, u.WorkloadEndpointRemove)
		}
	case *felix.ToDataplane_ActivePolicyUpdate:
		p.onPolicyUpdate(u.ActivePolicyUpdate)
	case *felix.ToDataplane_ActivePolicyRemove:
		if k, err := felixconv.PolicyKeyOf(u.ActivePolicyRemove.GetId()); err == nil {
			delete(p.policies, k) // endpoints stopped referencing it already
		}
	case *felix.ToDataplane_ActiveProfileUpdate:
		p.onProfileUpdate(u.ActiveProfileUpdate)
	case *felix.ToDataplane_ActiveProfileRemove:
		delete(p.profiles, u.ActiveProfileRemove.GetId().GetName())
	case *felix.ToDataplane_IpsetUpdate:
		p.onIPSetUpdate(u.IpsetUpdate)
	case *felix.ToDataplane_IpsetDeltaUpdate:
		p.onIPSetDelta(u.IpsetDeltaUpdate)
	case *felix.ToDataplane_IpsetRemove:
		delete(p.ipsets, u.IpsetRemove.GetId())
	case *felix.ToDataplane_ServiceAccountUpdate:
		k := saKey(u.ServiceAccountUpdate.GetId())
		if old := p.accounts[k]; old != nil && proto.Equal(old.upd, u.ServiceAccountUpdate) {
			old.stale = false
			return
		}
		p.accounts[k] = &kept[*felix.ServiceAccountUpdate]{upd: u.ServiceAccountUpdate}
		p.broadcastLocked(m)
	case *felix.ToDataplane_ServiceAccountRemove:
		delete(p.accounts, saKey(u.ServiceAccountRemove.GetId()))
		p.broadcastLocked(m)
	case *felix.ToDataplane_NamespaceUpdate:
		k := u.NamespaceUpdate.GetId().GetName()
		if old := p.namespaces[k]; old != nil && proto.Equal(old.upd, u.NamespaceUpdate) {
			old.stale = false
			return
		}
		p.namespaces[k] = &kept[*felix.NamespaceUpdate]{upd: u.NamespaceUpdate}
		p.broadcastLocked(m)
	case *felix.ToDataplane_NamespaceRemove:
		delete(p.namespaces, u.NamespaceRemove.GetId().GetName())
		p.broadcastLocked(m)
	}
}

func saKey(id *felix.ServiceAccountID) string { return id.GetNamespace() + "/" + id.GetName() }

// onInSync ends a session's snapshot (sweeping what it did not re-send) and
// tells clients the first time.
func (p *Processor) onInSync() {
	if p.epochOpen {
		p.epochOpen = false
		p.sweepLocked()
	}
	if p.inSync {
		return
	}
	p.inSync = true
	p.broadcastLocked(inSyncMsg())
}

func inSyncMsg() *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}
}

// sweepLocked removes what the session did not re-send: endpoints first
// (their clients get the removals), then what only they referenced.
func (p *Processor) sweepLocked() {
	for id, ep := range p.eps {
		if ep.upd != nil && ep.stale {
			p.removeEndpoint(id, &felix.WorkloadEndpointRemove{Id: ep.upd.GetId()})
		}
	}
	for k, e := range p.policies {
		if e.stale {
			delete(p.policies, k)
		}
	}
	for k, e := range p.profiles {
		if e.stale {
			delete(p.profiles, k)
		}
	}
	for k, e := range p.ipsets {
		if e.stale {
			delete(p.ipsets, k)
		}
	}
	for _, k := range sortedKeys(p.accounts) {
		if e := p.accounts[k]; e.stale {
			delete(p.accounts, k)
			p.broadcastLocked(&felix.ToDataplane{Payload: &felix.ToDataplane_ServiceAccountRemove{
				ServiceAccountRemove: &felix.ServiceAccountRemove{Id: e.upd.GetId()}}})
		}
	}
	for _, k := range sortedKeys(p.namespaces) {
		if e := p.namespaces[k]; e.stale {
			delete(p.namespaces, k)
			p.broadcastLocked(&felix.ToDataplane{Payload: &felix.ToDataplane_NamespaceRemove{
				NamespaceRemove: &felix.NamespaceRemove{Id: e.upd.GetId()}}})
		}
	}
}

func (p *Processor) onEndpointUpdate(u *felix.WorkloadEndpointUpdate) {
	id, err := felixconv.Endpoint(u.GetId())
	if err != nil {
		return
	}
	ep := p.eps[id]
	if ep == nil {
		ep = &endpoint{}
		p.eps[id] = ep
	}
	ep.stale = false
	if ep.upd != nil && proto.Equal(ep.upd, u) {
		return
	}
	ep.upd = u
	p.syncEndpointLocked(ep)
}

// removeEndpoint tells the endpoint's client, ends its stream (as Calico
// does) and forgets the endpoint.
func (p *Processor) removeEndpoint(id model.WorkloadID, r *felix.WorkloadEndpointRemove) {
	ep := p.eps[id]
	if ep == nil {
		return
	}
	if ep.sub != nil {
		p.sendLocked(ep, &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: r}})
		p.disconnectLocked(ep, ErrEndpointRemoved)
	}
	delete(p.eps, id)
}

func (p *Processor) onPolicyUpdate(u *felix.ActivePolicyUpdate) {
	k, err := felixconv.PolicyKeyOf(u.GetId())
	if err != nil {
		return
	}
	if old := p.policies[k]; old != nil && proto.Equal(old.upd, u) {
		old.stale = false
		return
	}
	pol := u.GetPolicy()
	p.policies[k] = &rulesEntry[*felix.ActivePolicyUpdate]{upd: u, sets: ruleSets(pol.GetInboundRules(), pol.GetOutboundRules())}
	msg := &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: u}}
	for _, ep := range p.connected() {
		if ep.referencesPolicy(k) {
			p.sendWithSetsLocked(ep, msg, func() { ep.syncedPolicies[k] = true })
		}
	}
}

func (p *Processor) onProfileUpdate(u *felix.ActiveProfileUpdate) {
	k := u.GetId().GetName()
	if old := p.profiles[k]; old != nil && proto.Equal(old.upd, u) {
		old.stale = false
		return
	}
	pr := u.GetProfile()
	p.profiles[k] = &rulesEntry[*felix.ActiveProfileUpdate]{upd: u, sets: ruleSets(pr.GetInboundRules(), pr.GetOutboundRules())}
	msg := &felix.ToDataplane{Payload: &felix.ToDataplane_ActiveProfileUpdate{ActiveProfileUpdate: u}}
	for _, ep := range p.connected() {
		if ep.referencesProfile(k) {
			p.sendWithSetsLocked(ep, msg, func() { ep.syncedProfiles[k] = true })
		}
	}
}

// ruleSets lists the IP sets rules reference, every kind of reference.
func ruleSets(lists ...[]*felix.Rule) []string {
	seen := map[string]struct{}{}
	for _, rules := range lists {
		for _, r := range rules {
			for _, ids := range [][]string{
				r.GetSrcIpSetIds(), r.GetDstIpSetIds(), r.GetSrcNamedPortIpSetIds(), r.GetDstNamedPortIpSetIds(),
				r.GetDstIpPortSetIds(), r.GetNotSrcIpSetIds(), r.GetNotDstIpSetIds(),
				r.GetNotSrcNamedPortIpSetIds(), r.GetNotDstNamedPortIpSetIds(),
			} {
				for _, id := range ids {
					seen[id] = struct{}{}
				}
			}
		}
	}
	return sortedKeys(seen)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
