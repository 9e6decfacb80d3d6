package e2e

import (
	"fmt"
	"sort"

	"github.com/dpd-dev/dpd/proto/felix"
	"google.golang.org/protobuf/proto"
)

// This file builds the ToDataplane messages the suite sends. rules.go holds
// the Rule builders.

// InSync ends the snapshot.
func InSync() *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}
}

// IPSet replaces a whole IP set.
func IPSet(id string, typ felix.IPSetUpdate_IPSetType, members ...string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{
		Id: id, Type: typ, Members: members,
	}}}
}

// IPSetDelta adds and removes members of an existing set.
func IPSetDelta(id string, added, removed []string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{
		Id: id, AddedMembers: added, RemovedMembers: removed,
	}}}
}

// IPSetRemove deletes a set.
func IPSetRemove(id string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetRemove{IpsetRemove: &felix.IPSetRemove{Id: id}}}
}

// Profile defines a profile's inbound and outbound rules.
func Profile(name string, inbound, outbound []*felix.Rule) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ActiveProfileUpdate{ActiveProfileUpdate: &felix.ActiveProfileUpdate{
		Id:      &felix.ProfileID{Name: name},
		Profile: &felix.Profile{InboundRules: inbound, OutboundRules: outbound},
	}}}
}

// ProfileRemove deletes a profile.
func ProfileRemove(name string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ActiveProfileRemove{ActiveProfileRemove: &felix.ActiveProfileRemove{
		Id: &felix.ProfileID{Name: name},
	}}}
}

// PolicyID names a global policy. PolicyID carries no tier (Policy.tier and
// TierInfo do), so names are unique across tiers, as in Calico, where a
// tiered policy's name starts with "<tier>.".
func PolicyID(name string) *felix.PolicyID {
	return &felix.PolicyID{Name: name, Kind: "GlobalNetworkPolicy"}
}

// Policy defines the rules of policy name in tier.
func Policy(tier, name string, inbound, outbound []*felix.Rule) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
		Id:     PolicyID(name),
		Policy: &felix.Policy{InboundRules: inbound, OutboundRules: outbound, Tier: tier},
	}}}
}

// PolicyRemove deletes a policy.
func PolicyRemove(id *felix.PolicyID) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyRemove{ActivePolicyRemove: &felix.ActivePolicyRemove{Id: id}}}
}

// Tier lists the policies of tier name per direction. defaultAction is ""
// (Deny) or "Pass".
func Tier(name, defaultAction string, ingress, egress []string) *felix.TierInfo {
	ti := &felix.TierInfo{Name: name, DefaultAction: defaultAction}
	for _, p := range ingress {
		ti.IngressPolicies = append(ti.IngressPolicies, PolicyID(p))
	}
	for _, p := range egress {
		ti.EgressPolicies = append(ti.EgressPolicies, PolicyID(p))
	}
	return ti
}

// Endpoint describes w to dpd with the given profiles and tiers, with its
// IPv4 and, when it is dual-stack, IPv6 address.
func Endpoint(w *Workload, profiles []string, tiers ...*felix.TierInfo) *felix.ToDataplane {
	ip4 := w.IP4
	if ip4 == "" && w.IP6 == "" {
		ip4 = w.IP
	}
	ep := &felix.WorkloadEndpoint{
		State:      "active",
		Name:       w.HostIface,
		Mac:        w.MAC,
		ProfileIds: profiles,
		Tiers:      tiers,
	}
	if ip4 != "" {
		ep.Ipv4Nets = []string{ip4 + "/32"}
	}
	if w.IP6 != "" {
		ep.Ipv6Nets = []string{w.IP6 + "/128"}
	}
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
		Id: w.ID(), Endpoint: ep,
	}}}
}

// WorkloadEndpointRemove deletes an endpoint.
func WorkloadEndpointRemove(id *felix.WorkloadEndpointID) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{Id: id}}}
}

// Scenario is a complete desired state: IP sets, profiles, policies and
// endpoints, as IPSetUpdate, ActiveProfileUpdate, ActivePolicyUpdate and
// WorkloadEndpointUpdate messages in any order.
type Scenario []*felix.ToDataplane

// EndpointIDs lists the workload endpoints s describes.
func (s Scenario) EndpointIDs() []*felix.WorkloadEndpointID {
	var ids []*felix.WorkloadEndpointID
	for _, m := range s {
		if u := m.GetWorkloadEndpointUpdate(); u != nil {
			ids = append(ids, u.GetId())
		}
	}
	return ids
}

// Ranks order updates by dependency (sets before the policies that use
// them, policies before the endpoints that reference them); removals run in
// the reverse order, as Felix's calc graph sends them.
const (
	rankIPSet = iota
	rankProfile
	rankPolicy
	rankEndpoint
)

type scenarioItem struct {
	rank int
	key  string
	msg  *felix.ToDataplane
}

func itemOf(m *felix.ToDataplane) (scenarioItem, error) {
	switch {
	case m.GetIpsetUpdate() != nil:
		return scenarioItem{rankIPSet, m.GetIpsetUpdate().GetId(), m}, nil
	case m.GetActiveProfileUpdate() != nil:
		return scenarioItem{rankProfile, m.GetActiveProfileUpdate().GetId().GetName(), m}, nil
	case m.GetActivePolicyUpdate() != nil:
		id := m.GetActivePolicyUpdate().GetId()
		return scenarioItem{rankPolicy, id.GetKind() + "/" + id.GetNamespace() + "/" + id.GetName(), m}, nil
	case m.GetWorkloadEndpointUpdate() != nil:
		return scenarioItem{rankEndpoint, endpointKey(m.GetWorkloadEndpointUpdate().GetId()), m}, nil
	}
	return scenarioItem{}, fmt.Errorf("scenario cannot hold %T", m.GetPayload())
}

func (s Scenario) items() (map[[2]string]scenarioItem, error) {
	out := map[[2]string]scenarioItem{}
	for _, m := range s {
		it, err := itemOf(m)
		if err != nil {
			return nil, err
		}
		out[[2]string{fmt.Sprint(it.rank), it.key}] = it
	}
	return out, nil
}

// Messages returns what a calc graph sends to move the dataplane from prev
// (nil for an empty dataplane) to s: changed and new items in dependency
// order, then removals of what s no longer has in reverse order. Unchanged
// items are not re-sent.
func (s Scenario) Messages(prev Scenario) ([]*felix.ToDataplane, error) {
	want, err := s.items()
	if err != nil {
		return nil, err
	}
	have, err := prev.items()
	if err != nil {
		return nil, err
	}
	var ups, rms []scenarioItem
	for k, it := range want {
		if old, ok := have[k]; !ok || !proto.Equal(old.msg, it.msg) {
			ups = append(ups, it)
		}
	}
	for k, it := range have {
		if _, ok := want[k]; !ok {
			rms = append(rms, it)
		}
	}
	sort.Slice(ups, func(i, j int) bool { return less(ups[i], ups[j]) })
	sort.Slice(rms, func(i, j int) bool {
		if rms[i].rank != rms[j].rank {
			return rms[i].rank > rms[j].rank
		}
		return rms[i].key < rms[j].key
	})
	msgs := make([]*felix.ToDataplane, 0, len(ups)+len(rms))
	for _, it := range ups {
		msgs = append(msgs, proto.Clone(it.msg).(*felix.ToDataplane))
	}
	for _, it := range rms {
		msgs = append(msgs, removal(it.msg))
	}
	return msgs, nil
}

func less(a, b scenarioItem) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.key < b.key
}

func removal(m *felix.ToDataplane) *felix.ToDataplane {
	switch {
	case m.GetIpsetUpdate() != nil:
		return IPSetRemove(m.GetIpsetUpdate().GetId())
	case m.GetActiveProfileUpdate() != nil:
		return ProfileRemove(m.GetActiveProfileUpdate().GetId().GetName())
	case m.GetActivePolicyUpdate() != nil:
		return PolicyRemove(m.GetActivePolicyUpdate().GetId())
	default:
		return WorkloadEndpointRemove(m.GetWorkloadEndpointUpdate().GetId())
	}
}
