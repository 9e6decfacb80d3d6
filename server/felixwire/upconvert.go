package felixwire

import (
	"fmt"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/proto/felixlegacy"
)

// up converts an older message into the current form. Payloads that did
// not change are the felix package's own messages and pass as they are.
func (d *Decoder) up(m *felixlegacy.ToDataplane) (*felix.ToDataplane, error) {
	out := &felix.ToDataplane{SequenceNumber: m.GetSequenceNumber()}
	var err error
	switch p := m.Payload.(type) {
	case nil:
	case *felixlegacy.ToDataplane_ActivePolicyUpdate:
		var u *felix.ActivePolicyUpdate
		if u, err = upPolicyUpdate(p.ActivePolicyUpdate); err == nil {
			out.Payload = &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: u}
		}
	case *felixlegacy.ToDataplane_ActivePolicyRemove:
		var id *felix.PolicyID
		if id, err = upPolicyRef(p.ActivePolicyRemove.GetId()); err == nil {
			out.Payload = &felix.ToDataplane_ActivePolicyRemove{ActivePolicyRemove: &felix.ActivePolicyRemove{Id: id}}
		}
	case *felixlegacy.ToDataplane_WorkloadEndpointUpdate:
		var u *felix.WorkloadEndpointUpdate
		if u, err = upWorkloadUpdate(p.WorkloadEndpointUpdate); err == nil {
			out.Payload = &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: u}
		}
	case *felixlegacy.ToDataplane_HostEndpointUpdate:
		var u *felix.HostEndpointUpdate
		if u, err = upHostEndpointUpdate(p.HostEndpointUpdate); err == nil {
			out.Payload = &felix.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: u}
		}
	case *felixlegacy.ToDataplane_RouteUpdate:
		var u *felix.RouteUpdate
		if u, err = upRoute(p.RouteUpdate); err == nil {
			out.Payload = &felix.ToDataplane_RouteUpdate{RouteUpdate: u}
		}
	default:
		if !d.upHostMeta(m, out) {
			err = upUnchanged(m, out)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// upHostMeta converts the older host metadata payloads, reporting whether
// m had one.
func (d *Decoder) upHostMeta(m *felixlegacy.ToDataplane, out *felix.ToDataplane) bool {
	switch p := m.Payload.(type) {
	case *felixlegacy.ToDataplane_HostMetadataUpdate:
		d.hosts.v4(p.HostMetadataUpdate, out)
	case *felixlegacy.ToDataplane_HostMetadataRemove:
		d.hosts.v4Remove(p.HostMetadataRemove, out)
	case *felixlegacy.ToDataplane_HostMetadataV6Update:
		d.hosts.v6(p.HostMetadataV6Update, out)
	case *felixlegacy.ToDataplane_HostMetadataV6Remove:
		d.hosts.v6Remove(p.HostMetadataV6Remove, out)
	case *felixlegacy.ToDataplane_HostMetadataV4V6Update:
		d.hosts.v4v6(p.HostMetadataV4V6Update, out)
	case *felixlegacy.ToDataplane_HostMetadataV4V6Remove:
		d.hosts.v4v6Remove(p.HostMetadataV4V6Remove, out)
	default:
		return false
	}
	return true
}

// upPolicyRef converts an older PolicyID; the tier is not part of the
// current identity (the name still carries it, see upPolicyID).
func upPolicyRef(id *felixlegacy.PolicyID) (*felix.PolicyID, error) {
	if id == nil {
		return nil, nil // felixconv reports the missing id
	}
	if id.GetTier() == "" {
		return nil, fmt.Errorf("policy id %q: tier is empty", id.GetName())
	}
	return upPolicyID(id.GetName())
}

func upPolicyUpdate(u *felixlegacy.ActivePolicyUpdate) (*felix.ActivePolicyUpdate, error) {
	id, err := upPolicyRef(u.GetId())
	if err != nil {
		return nil, err
	}
	out := &felix.ActivePolicyUpdate{Id: id}
	if p := u.GetPolicy(); p != nil {
		out.Policy = &felix.Policy{
			InboundRules: p.InboundRules, OutboundRules: p.OutboundRules,
			Untracked: p.Untracked, PreDnat: p.PreDnat, Namespace: p.Namespace,
			OriginalSelector: p.OriginalSelector, PerfHints: p.PerfHints,
			// The older Policy had no tier: its id named it.
			Tier: u.GetId().GetTier(),
		}
	}
	return out, nil
}

// upTiers converts tier lists: each older policy name becomes the PolicyID
// its ActivePolicyUpdate converted to.
func upTiers(ts []*felixlegacy.TierInfo) ([]*felix.TierInfo, error) {
	if ts == nil {
		return nil, nil
	}
	out := make([]*felix.TierInfo, 0, len(ts))
	for _, t := range ts {
		if t == nil {
			out = append(out, nil)
			continue
		}
		nt := &felix.TierInfo{Name: t.Name, DefaultAction: t.DefaultAction}
		var err error
		if nt.IngressPolicies, err = upNames(t.IngressPolicies); err != nil {
			return nil, fmt.Errorf("tier %s ingress_policies: %w", t.Name, err)
		}
		if nt.EgressPolicies, err = upNames(t.EgressPolicies); err != nil {
			return nil, fmt.Errorf("tier %s egress_policies: %w", t.Name, err)
		}
		out = append(out, nt)
	}
	return out, nil
}

func upNames(names []string) ([]*felix.PolicyID, error) {
	if names == nil {
		return nil, nil
	}
	out := make([]*felix.PolicyID, 0, len(names))
	for i, n := range names {
		id, err := upPolicyID(n)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, id)
	}
	return out, nil
}

func upWorkloadUpdate(u *felixlegacy.WorkloadEndpointUpdate) (*felix.WorkloadEndpointUpdate, error) {
	out := &felix.WorkloadEndpointUpdate{Id: u.GetId()}
	ep := u.GetEndpoint()
	if ep == nil {
		return out, nil
	}
	tiers, err := upTiers(ep.Tiers)
	if err != nil {
		return nil, err
	}
	out.Endpoint = &felix.WorkloadEndpoint{
		State: ep.State, Name: ep.Name, Mac: ep.Mac, ProfileIds: ep.ProfileIds,
		Ipv4Nets: ep.Ipv4Nets, Ipv6Nets: ep.Ipv6Nets, Tiers: tiers,
		Ipv4Nat: ep.Ipv4Nat, Ipv6Nat: ep.Ipv6Nat,
		AllowSpoofedSourcePrefixes: ep.AllowSpoofedSourcePrefixes,
		Annotations:                ep.Annotations, QosControls: ep.QosControls,
		LocalBgpPeer: ep.LocalBgpPeer, SkipRedir: ep.SkipRedir, QosPolicies: ep.QosPolicies,
	}
	return out, nil
}

func upHostEndpointUpdate(u *felixlegacy.HostEndpointUpdate) (*felix.HostEndpointUpdate, error) {
	out := &felix.HostEndpointUpdate{Id: u.GetId()}
	ep := u.GetEndpoint()
	if ep == nil {
		return out, nil
	}
	n := &felix.HostEndpoint{
		Name: ep.Name, ProfileIds: ep.ProfileIds,
		ExpectedIpv4Addrs: ep.ExpectedIpv4Addrs, ExpectedIpv6Addrs: ep.ExpectedIpv6Addrs,
		QosPolicies: ep.QosPolicies,
	}
	var err error
	for _, l := range []struct {
		name string
		in   []*felixlegacy.TierInfo
		out  *[]*felix.TierInfo
	}{
		{"tiers", ep.Tiers, &n.Tiers},
		{"untracked_tiers", ep.UntrackedTiers, &n.UntrackedTiers},
		{"pre_dnat_tiers", ep.PreDnatTiers, &n.PreDnatTiers},
		{"forward_tiers", ep.ForwardTiers, &n.ForwardTiers},
	} {
		if *l.out, err = upTiers(l.in); err != nil {
			return nil, fmt.Errorf("%s: %w", l.name, err)
		}
	}
	out.Endpoint = n
	return out, nil
}

// routeTypeBits maps the consecutive route types of v3.28/v3.29 to the
// bits of RouteUpdate.types.
var routeTypeBits = map[felixlegacy.RouteType]felix.RouteType{
	felixlegacy.RouteType_CIDR_INFO:       felix.RouteType_CIDR_INFO,
	felixlegacy.RouteType_REMOTE_WORKLOAD: felix.RouteType_REMOTE_WORKLOAD,
	felixlegacy.RouteType_REMOTE_HOST:     felix.RouteType_REMOTE_HOST,
	felixlegacy.RouteType_LOCAL_WORKLOAD:  felix.RouteType_LOCAL_WORKLOAD,
	felixlegacy.RouteType_LOCAL_HOST:      felix.RouteType_LOCAL_HOST,
	felixlegacy.RouteType_REMOTE_TUNNEL:   felix.RouteType_REMOTE_TUNNEL,
	felixlegacy.RouteType_LOCAL_TUNNEL:    felix.RouteType_LOCAL_TUNNEL,
}

func upRoute(r *felixlegacy.RouteUpdate) (*felix.RouteUpdate, error) {
	bits, ok := routeTypeBits[r.Type]
	if !ok {
		return nil, fmt.Errorf("route %s: unknown type %d", r.Dst, r.Type)
	}
	return &felix.RouteUpdate{
		Types:      r.Types | bits,
		IpPoolType: r.IpPoolType, Dst: r.Dst, DstNodeName: r.DstNodeName, DstNodeIp: r.DstNodeIp,
		SameSubnet: r.SameSubnet, NatOutgoing: r.NatOutgoing, LocalWorkload: r.LocalWorkload,
		TunnelType: r.TunnelType, Borrowed: r.Borrowed,
	}, nil
}

// upUnchanged moves a payload both generations share.
func upUnchanged(m *felixlegacy.ToDataplane, out *felix.ToDataplane) error {
	switch p := m.Payload.(type) {
	case *felixlegacy.ToDataplane_InSync:
		out.Payload = &felix.ToDataplane_InSync{InSync: p.InSync}
	case *felixlegacy.ToDataplane_IpsetUpdate:
		out.Payload = &felix.ToDataplane_IpsetUpdate{IpsetUpdate: p.IpsetUpdate}
	case *felixlegacy.ToDataplane_IpsetDeltaUpdate:
		out.Payload = &felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: p.IpsetDeltaUpdate}
	case *felixlegacy.ToDataplane_IpsetRemove:
		out.Payload = &felix.ToDataplane_IpsetRemove{IpsetRemove: p.IpsetRemove}
	case *felixlegacy.ToDataplane_ActiveProfileUpdate:
		out.Payload = &felix.ToDataplane_ActiveProfileUpdate{ActiveProfileUpdate: p.ActiveProfileUpdate}
	case *felixlegacy.ToDataplane_ActiveProfileRemove:
		out.Payload = &felix.ToDataplane_ActiveProfileRemove{ActiveProfileRemove: p.ActiveProfileRemove}
	case *felixlegacy.ToDataplane_HostEndpointRemove:
		out.Payload = &felix.ToDataplane_HostEndpointRemove{HostEndpointRemove: p.HostEndpointRemove}
	case *felixlegacy.ToDataplane_WorkloadEndpointRemove:
		out.Payload = &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: p.WorkloadEndpointRemove}
	case *felixlegacy.ToDataplane_ConfigUpdate:
		out.Payload = &felix.ToDataplane_ConfigUpdate{ConfigUpdate: p.ConfigUpdate}
	case *felixlegacy.ToDataplane_IpamPoolUpdate:
		out.Payload = &felix.ToDataplane_IpamPoolUpdate{IpamPoolUpdate: p.IpamPoolUpdate}
	case *felixlegacy.ToDataplane_IpamPoolRemove:
		out.Payload = &felix.ToDataplane_IpamPoolRemove{IpamPoolRemove: p.IpamPoolRemove}
	case *felixlegacy.ToDataplane_ServiceAccountUpdate:
		out.Payload = &felix.ToDataplane_ServiceAccountUpdate{ServiceAccountUpdate: p.ServiceAccountUpdate}
	case *felixlegacy.ToDataplane_ServiceAccountRemove:
		out.Payload = &felix.ToDataplane_ServiceAccountRemove{ServiceAccountRemove: p.ServiceAccountRemove}
	case *felixlegacy.ToDataplane_NamespaceUpdate:
		out.Payload = &felix.ToDataplane_NamespaceUpdate{NamespaceUpdate: p.NamespaceUpdate}
	case *felixlegacy.ToDataplane_NamespaceRemove:
		out.Payload = &felix.ToDataplane_NamespaceRemove{NamespaceRemove: p.NamespaceRemove}
	case *felixlegacy.ToDataplane_RouteRemove:
		out.Payload = &felix.ToDataplane_RouteRemove{RouteRemove: p.RouteRemove}
	case *felixlegacy.ToDataplane_VtepUpdate:
		out.Payload = &felix.ToDataplane_VtepUpdate{VtepUpdate: p.VtepUpdate}
	case *felixlegacy.ToDataplane_VtepRemove:
		out.Payload = &felix.ToDataplane_VtepRemove{VtepRemove: p.VtepRemove}
	case *felixlegacy.ToDataplane_WireguardEndpointUpdate:
		out.Payload = &felix.ToDataplane_WireguardEndpointUpdate{WireguardEndpointUpdate: p.WireguardEndpointUpdate}
	case *felixlegacy.ToDataplane_WireguardEndpointRemove:
		out.Payload = &felix.ToDataplane_WireguardEndpointRemove{WireguardEndpointRemove: p.WireguardEndpointRemove}
	case *felixlegacy.ToDataplane_GlobalBgpConfigUpdate:
		out.Payload = &felix.ToDataplane_GlobalBgpConfigUpdate{GlobalBgpConfigUpdate: p.GlobalBgpConfigUpdate}
	case *felixlegacy.ToDataplane_Encapsulation:
		out.Payload = &felix.ToDataplane_Encapsulation{Encapsulation: p.Encapsulation}
	case *felixlegacy.ToDataplane_ServiceUpdate:
		out.Payload = &felix.ToDataplane_ServiceUpdate{ServiceUpdate: p.ServiceUpdate}
	case *felixlegacy.ToDataplane_ServiceRemove:
		out.Payload = &felix.ToDataplane_ServiceRemove{ServiceRemove: p.ServiceRemove}
	case *felixlegacy.ToDataplane_WireguardEndpointV6Update:
		out.Payload = &felix.ToDataplane_WireguardEndpointV6Update{WireguardEndpointV6Update: p.WireguardEndpointV6Update}
	case *felixlegacy.ToDataplane_WireguardEndpointV6Remove:
		out.Payload = &felix.ToDataplane_WireguardEndpointV6Remove{WireguardEndpointV6Remove: p.WireguardEndpointV6Remove}
	default:
		return fmt.Errorf("no conversion for %T", p)
	}
	return nil
}
