package felixconv

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Endpoint converts a workload endpoint ID; all three parts are required.
func Endpoint(id *felix.WorkloadEndpointID) (model.WorkloadID, error) {
	if id == nil {
		return model.WorkloadID{}, errors.New("endpoint id: missing")
	}
	wid := model.WorkloadID{Orchestrator: id.OrchestratorId, Workload: id.WorkloadId, Endpoint: id.EndpointId}
	if err := required("orchestrator_id", wid.Orchestrator); err != nil {
		return model.WorkloadID{}, err
	}
	if err := required("workload_id", wid.Workload); err != nil {
		return model.WorkloadID{}, err
	}
	if err := required("endpoint_id", wid.Endpoint); err != nil {
		return model.WorkloadID{}, err
	}
	return wid, nil
}

// PolicyKeyOf converts a PolicyID; the name is required.
func PolicyKeyOf(id *felix.PolicyID) (model.PolicyKey, error) {
	if id == nil {
		return model.PolicyKey{}, errors.New("policy id: missing")
	}
	if err := required("policy name", id.Name); err != nil {
		return model.PolicyKey{}, err
	}
	return model.PolicyKey{Kind: id.Kind, Namespace: id.Namespace, Name: id.Name}, nil
}

// TierDefaultAction parses TierInfo.default_action: "" and "Deny" are
// ActionDeny (Calico's default), "Pass" is ActionPass; any case.
func TierDefaultAction(s string) (model.Action, error) {
	switch strings.ToLower(s) {
	case "", "deny":
		return model.ActionDeny, nil
	case "pass":
		return model.ActionPass, nil
	}
	return 0, fmt.Errorf("unknown tier default action %q", s)
}

// Tiers parses an endpoint's tier list.
func Tiers(ts []*felix.TierInfo) ([]model.TierRef, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	out := make([]model.TierRef, 0, len(ts))
	for i, t := range ts {
		if t == nil {
			return nil, fmt.Errorf("tier %d: nil", i)
		}
		if t.Name == "" {
			return nil, fmt.Errorf("tier %d: name: %w", i, errEmpty)
		}
		da, err := TierDefaultAction(t.DefaultAction)
		if err != nil {
			return nil, fmt.Errorf("tier %s: %w", t.Name, err)
		}
		ref := model.TierRef{Name: t.Name, DefaultAction: da}
		if ref.Ingress, err = policyKeys(t.IngressPolicies); err != nil {
			return nil, fmt.Errorf("tier %s: ingress_policies%w", t.Name, err)
		}
		if ref.Egress, err = policyKeys(t.EgressPolicies); err != nil {
			return nil, fmt.Errorf("tier %s: egress_policies%w", t.Name, err)
		}
		out = append(out, ref)
	}
	return out, nil
}

func policyKeys(ids []*felix.PolicyID) ([]model.PolicyKey, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]model.PolicyKey, 0, len(ids))
	for i, id := range ids {
		k, err := PolicyKeyOf(id)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// WorkloadEndpointUpdate parses u. The interface name is required; the
// MAC is parsed when present; ipv4_nets must be IPv4 and ipv6_nets IPv6.
func WorkloadEndpointUpdate(u *felix.WorkloadEndpointUpdate) (model.WorkloadEndpoint, error) {
	if u == nil {
		return model.WorkloadEndpoint{}, errors.New("nil update")
	}
	id, err := Endpoint(u.Id)
	if err != nil {
		return model.WorkloadEndpoint{}, err
	}
	return workloadEndpoint(id, u.Endpoint)
}

// workloadEndpoint parses the body of the update for endpoint id.
func workloadEndpoint(id model.WorkloadID, ep *felix.WorkloadEndpoint) (model.WorkloadEndpoint, error) {
	if ep == nil {
		return model.WorkloadEndpoint{}, errors.New("endpoint: missing")
	}
	out := model.WorkloadEndpoint{ID: id, Iface: ep.Name}
	if err := ifaceName("name (interface)", ep.Name); err != nil {
		return model.WorkloadEndpoint{}, err
	}
	var err error
	if ep.Mac != "" {
		if out.MAC, err = parseMAC(ep.Mac); err != nil {
			return model.WorkloadEndpoint{}, fmt.Errorf("mac: %w", err)
		}
	}
	if out.IPv4Nets, err = familyPrefixes("ipv4_nets", ep.Ipv4Nets, 4); err != nil {
		return model.WorkloadEndpoint{}, err
	}
	if out.IPv6Nets, err = familyPrefixes("ipv6_nets", ep.Ipv6Nets, 6); err != nil {
		return model.WorkloadEndpoint{}, err
	}
	if err := natInfos("ipv4_nat", ep.Ipv4Nat); err != nil {
		return model.WorkloadEndpoint{}, err
	}
	if err := natInfos("ipv6_nat", ep.Ipv6Nat); err != nil {
		return model.WorkloadEndpoint{}, err
	}
	if _, err := prefixList("allow_spoofed_source_prefixes", ep.AllowSpoofedSourcePrefixes); err != nil {
		return model.WorkloadEndpoint{}, err
	}
	if err := nonEmpty("profile_ids", ep.ProfileIds); err != nil {
		return model.WorkloadEndpoint{}, err
	}
	if len(ep.ProfileIds) > 0 {
		out.Profiles = append([]string(nil), ep.ProfileIds...)
	}
	if out.Tiers, err = Tiers(ep.Tiers); err != nil {
		return model.WorkloadEndpoint{}, err
	}
	return out, nil
}

func familyPrefixes(field string, ss []string, family int) ([]netip.Prefix, error) {
	ps, err := prefixList(field, ss)
	if err != nil {
		return nil, err
	}
	for i, p := range ps {
		if (family == 4) != p.Addr().Is4() {
			return nil, fmt.Errorf("%s[%d]: %s is not IPv%d", field, i, p, family)
		}
	}
	return ps, nil
}

func natInfos(field string, ns []*felix.NatInfo) error {
	for i, n := range ns {
		if n == nil {
			return fmt.Errorf("%s[%d]: nil", field, i)
		}
		if _, err := parseAddr(n.ExtIp); err != nil {
			return fmt.Errorf("%s[%d].ext_ip: %w", field, i, err)
		}
		if _, err := parseAddr(n.IntIp); err != nil {
			return fmt.Errorf("%s[%d].int_ip: %w", field, i, err)
		}
	}
	return nil
}

// HostEndpoint parses a HostEndpointUpdate. dpd does not program host
// endpoints yet, but a bad one is still reported, not swallowed. The
// interface name may be "" (match by expected addresses) or "*" (all).
func HostEndpoint(u *felix.HostEndpointUpdate) (model.HostEndpoint, error) {
	out := model.HostEndpoint{ID: u.GetId().GetEndpointId()}
	if err := required("host endpoint id", out.ID); err != nil {
		return model.HostEndpoint{}, err
	}
	ep := u.GetEndpoint()
	if ep == nil {
		return model.HostEndpoint{}, errors.New("endpoint: missing")
	}
	out.Iface = ep.Name
	if ep.Name != "" && ep.Name != "*" {
		if err := ifaceName("name (interface)", ep.Name); err != nil {
			return model.HostEndpoint{}, err
		}
	}
	var err error
	if out.ExpectedIPv4, err = addrList("expected_ipv4_addrs", ep.ExpectedIpv4Addrs); err != nil {
		return model.HostEndpoint{}, err
	}
	if out.ExpectedIPv6, err = addrList("expected_ipv6_addrs", ep.ExpectedIpv6Addrs); err != nil {
		return model.HostEndpoint{}, err
	}
	if err := nonEmpty("profile_ids", ep.ProfileIds); err != nil {
		return model.HostEndpoint{}, err
	}
	if len(ep.ProfileIds) > 0 {
		out.Profiles = append([]string(nil), ep.ProfileIds...)
	}
	for _, ts := range []struct {
		field string
		tiers []*felix.TierInfo
		dst   *[]model.TierRef
	}{
		{"tiers", ep.Tiers, &out.Tiers}, {"untracked_tiers", ep.UntrackedTiers, &out.UntrackedTiers},
		{"pre_dnat_tiers", ep.PreDnatTiers, &out.PreDNATTiers}, {"forward_tiers", ep.ForwardTiers, &out.ForwardTiers},
	} {
		if *ts.dst, err = Tiers(ts.tiers); err != nil {
			return model.HostEndpoint{}, fmt.Errorf("%s: %w", ts.field, err)
		}
	}
	return out, nil
}
