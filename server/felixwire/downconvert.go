package felixwire

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/proto/felixlegacy"
)

// MarshalLegacy encodes msg as a Felix v3.30/v3.31 sends it: the inverse
// of what Decode does with those bytes, for tests that drive dpd as an
// older Felix would (and for the older policy-sync clients, should dpd
// serve them). Host metadata goes as HostMetadataV4V6Update/Remove (37/38);
// routes keep the types bitmap, as v3.30 and later send it.
func MarshalLegacy(msg *felix.ToDataplane) ([]byte, error) {
	// The older remove names the tier too; any non-empty tier reads back
	// to the same current id.
	lm, err := down(msg, "unknown")
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(lm)
}

// down converts m; removeTier is the tier an ActivePolicyRemove names
// (the current form does not carry it).
func down(m *felix.ToDataplane, removeTier string) (*felixlegacy.ToDataplane, error) {
	out := &felixlegacy.ToDataplane{SequenceNumber: m.GetSequenceNumber()}
	var err error
	switch p := m.Payload.(type) {
	case *felix.ToDataplane_ActivePolicyUpdate:
		u := p.ActivePolicyUpdate
		var id *felixlegacy.PolicyID
		if id, err = downPolicyID(u.GetPolicy().GetTier(), u.GetId()); err == nil {
			lu := &felixlegacy.ActivePolicyUpdate{Id: id}
			if pol := u.GetPolicy(); pol != nil {
				lu.Policy = &felixlegacy.Policy{InboundRules: pol.InboundRules, OutboundRules: pol.OutboundRules,
					Untracked: pol.Untracked, PreDnat: pol.PreDnat, Namespace: pol.Namespace,
					OriginalSelector: pol.OriginalSelector, PerfHints: pol.PerfHints}
			}
			out.Payload = &felixlegacy.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: lu}
		}
	case *felix.ToDataplane_ActivePolicyRemove:
		var id *felixlegacy.PolicyID
		if id, err = downPolicyID(removeTier, p.ActivePolicyRemove.GetId()); err == nil {
			out.Payload = &felixlegacy.ToDataplane_ActivePolicyRemove{ActivePolicyRemove: &felixlegacy.ActivePolicyRemove{Id: id}}
		}
	case *felix.ToDataplane_WorkloadEndpointUpdate:
		u := p.WorkloadEndpointUpdate
		lu := &felixlegacy.WorkloadEndpointUpdate{Id: u.GetId()}
		if ep := u.GetEndpoint(); ep != nil {
			lu.Endpoint = &felixlegacy.WorkloadEndpoint{State: ep.State, Name: ep.Name, Mac: ep.Mac, ProfileIds: ep.ProfileIds,
				Ipv4Nets: ep.Ipv4Nets, Ipv6Nets: ep.Ipv6Nets, Ipv4Nat: ep.Ipv4Nat, Ipv6Nat: ep.Ipv6Nat,
				AllowSpoofedSourcePrefixes: ep.AllowSpoofedSourcePrefixes, Annotations: ep.Annotations,
				QosControls: ep.QosControls, LocalBgpPeer: ep.LocalBgpPeer, SkipRedir: ep.SkipRedir, QosPolicies: ep.QosPolicies}
			lu.Endpoint.Tiers, err = downTiers(ep.Tiers)
		}
		out.Payload = &felixlegacy.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: lu}
	case *felix.ToDataplane_HostEndpointUpdate:
		u := p.HostEndpointUpdate
		lu := &felixlegacy.HostEndpointUpdate{Id: u.GetId()}
		if ep := u.GetEndpoint(); ep != nil {
			le := &felixlegacy.HostEndpoint{Name: ep.Name, ProfileIds: ep.ProfileIds,
				ExpectedIpv4Addrs: ep.ExpectedIpv4Addrs, ExpectedIpv6Addrs: ep.ExpectedIpv6Addrs, QosPolicies: ep.QosPolicies}
			for _, l := range []struct {
				in  []*felix.TierInfo
				out *[]*felixlegacy.TierInfo
			}{{ep.Tiers, &le.Tiers}, {ep.UntrackedTiers, &le.UntrackedTiers}, {ep.PreDnatTiers, &le.PreDnatTiers}, {ep.ForwardTiers, &le.ForwardTiers}} {
				if err == nil {
					*l.out, err = downTiers(l.in)
				}
			}
			lu.Endpoint = le
		}
		out.Payload = &felixlegacy.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: lu}
	case *felix.ToDataplane_RouteUpdate:
		r := p.RouteUpdate
		out.Payload = &felixlegacy.ToDataplane_RouteUpdate{RouteUpdate: &felixlegacy.RouteUpdate{Types: r.Types,
			IpPoolType: r.IpPoolType, Dst: r.Dst, DstNodeName: r.DstNodeName, DstNodeIp: r.DstNodeIp,
			SameSubnet: r.SameSubnet, NatOutgoing: r.NatOutgoing, LocalWorkload: r.LocalWorkload,
			TunnelType: r.TunnelType, Borrowed: r.Borrowed}}
	case *felix.ToDataplane_HostMetadataUpdate:
		u := p.HostMetadataUpdate
		out.Payload = &felixlegacy.ToDataplane_HostMetadataV4V6Update{HostMetadataV4V6Update: &felixlegacy.HostMetadataV4V6Update{
			Hostname: u.Hostname, Ipv4Addr: u.Ipv4Addr, Ipv6Addr: u.Ipv6Addr, Asnumber: u.Asnumber, Labels: u.Labels}}
	case *felix.ToDataplane_HostMetadataRemove:
		r := p.HostMetadataRemove
		out.Payload = &felixlegacy.ToDataplane_HostMetadataV4V6Remove{HostMetadataV4V6Remove: &felixlegacy.HostMetadataV4V6Remove{
			Hostname: r.Hostname, Ipv4Addr: r.Ipv4Addr}}
	default:
		// Every other payload is the same message in both generations, at
		// the same field number: re-reading the current bytes as the older
		// set moves it over.
		b, merr := proto.Marshal(m)
		if merr != nil {
			return nil, merr
		}
		if err = proto.Unmarshal(b, out); err == nil && m.Payload != nil && out.Payload == nil {
			err = fmt.Errorf("payload %T has no older form", m.Payload)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// downPolicyID builds the older (tier, v1 name) of a current id; see
// upPolicyID for the forms.
func downPolicyID(tier string, id *felix.PolicyID) (*felixlegacy.PolicyID, error) {
	if id == nil {
		return nil, nil
	}
	if tier == "" {
		tier = "default"
	}
	name := id.GetName()
	switch id.GetKind() {
	case KindKubernetesNetworkPolicy:
		name = knpPrefix + name
	case model.KindStagedKubernetesNetworkPolicy:
		name = stagedPrefix + knpPrefix + name
	case model.KindStagedNetworkPolicy, model.KindStagedGlobalNetworkPolicy:
		name = stagedPrefix + name
	case KindNetworkPolicy, KindGlobalNetworkPolicy:
	default:
		return nil, fmt.Errorf("policy %s: kind %q has no older name form", id.GetName(), id.GetKind())
	}
	if ns := id.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	return &felixlegacy.PolicyID{Tier: tier, Name: name}, nil
}

func downTiers(ts []*felix.TierInfo) ([]*felixlegacy.TierInfo, error) {
	if ts == nil {
		return nil, nil
	}
	out := make([]*felixlegacy.TierInfo, 0, len(ts))
	for _, t := range ts {
		lt := &felixlegacy.TierInfo{Name: t.GetName(), DefaultAction: t.GetDefaultAction()}
		for _, l := range []struct {
			in  []*felix.PolicyID
			out *[]string
		}{{t.GetIngressPolicies(), &lt.IngressPolicies}, {t.GetEgressPolicies(), &lt.EgressPolicies}} {
			for _, id := range l.in {
				lid, err := downPolicyID(t.GetName(), id)
				if err != nil {
					return nil, fmt.Errorf("tier %s: %w", t.GetName(), err)
				}
				*l.out = append(*l.out, lid.GetName())
			}
		}
		out = append(out, lt)
	}
	return out, nil
}
