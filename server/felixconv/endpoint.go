package felixconv

import (
	"errors"
	"fmt"
	"net"
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

// PolicyKey identifies an active policy as upstream's PolicyID does: by
// kind, namespace and name (the tier is no longer part of the identity).
type PolicyKey struct {
	Kind, Namespace, Name string
}

func (k PolicyKey) String() string {
	s := k.Name
	if k.Namespace != "" {
		s = k.Namespace + "/" + s
	}
	if k.Kind != "" {
		s = k.Kind + ":" + s
	}
	return s
}

// PolicyKeyOf converts a PolicyID; the name is required.
func PolicyKeyOf(id *felix.PolicyID) (PolicyKey, error) {
	if id == nil {
		return PolicyKey{}, errors.New("policy id: missing")
	}
	if err := required("policy name", id.Name); err != nil {
		return PolicyKey{}, err
	}
	return PolicyKey{Kind: id.Kind, Namespace: id.Namespace, Name: id.Name}, nil
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

// TierRef is one tier of an endpoint: the policies that apply, by key, in
// order per direction. The engine resolves keys to active policies.
type TierRef struct {
	Name          string
	DefaultAction model.Action
	Ingress       []PolicyKey
	Egress        []PolicyKey
}

// Tiers parses an endpoint's tier list.
func Tiers(ts []*felix.TierInfo) ([]TierRef, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	out := make([]TierRef, 0, len(ts))
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
		ref := TierRef{Name: t.Name, DefaultAction: da}
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

func policyKeys(ids []*felix.PolicyID) ([]PolicyKey, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]PolicyKey, 0, len(ids))
	for i, id := range ids {
		k, err := PolicyKeyOf(id)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// WorkloadEndpoint is a parsed WorkloadEndpointUpdate: the endpoint's
// identity, interface and addresses, and the tiers and profiles whose
// policy the engine resolves into model.Endpoint.
type WorkloadEndpoint struct {
	ID       model.WorkloadID
	Iface    string
	MAC      net.HardwareAddr // nil when Felix sent none
	IPv4Nets []netip.Prefix
	IPv6Nets []netip.Prefix
	Tiers    []TierRef
	Profiles []string
}

// WorkloadEndpointUpdate parses u. The interface name is required; the
// MAC is parsed when present; ipv4_nets must be IPv4 and ipv6_nets IPv6.
func WorkloadEndpointUpdate(u *felix.WorkloadEndpointUpdate) (WorkloadEndpoint, error) {
	if u == nil {
		return WorkloadEndpoint{}, errors.New("nil update")
	}
	id, err := Endpoint(u.Id)
	if err != nil {
		return WorkloadEndpoint{}, err
	}
	ep := u.Endpoint
	if ep == nil {
		return WorkloadEndpoint{}, errors.New("endpoint: missing")
	}
	out := WorkloadEndpoint{ID: id, Iface: ep.Name}
	if err := required("name (interface)", ep.Name); err != nil {
		return WorkloadEndpoint{}, err
	}
	if ep.Mac != "" {
		if out.MAC, err = parseMAC(ep.Mac); err != nil {
			return WorkloadEndpoint{}, fmt.Errorf("mac: %w", err)
		}
	}
	if out.IPv4Nets, err = familyPrefixes("ipv4_nets", ep.Ipv4Nets, 4); err != nil {
		return WorkloadEndpoint{}, err
	}
	if out.IPv6Nets, err = familyPrefixes("ipv6_nets", ep.Ipv6Nets, 6); err != nil {
		return WorkloadEndpoint{}, err
	}
	if err := natInfos("ipv4_nat", ep.Ipv4Nat); err != nil {
		return WorkloadEndpoint{}, err
	}
	if err := natInfos("ipv6_nat", ep.Ipv6Nat); err != nil {
		return WorkloadEndpoint{}, err
	}
	if _, err := prefixList("allow_spoofed_source_prefixes", ep.AllowSpoofedSourcePrefixes); err != nil {
		return WorkloadEndpoint{}, err
	}
	if err := nonEmpty("profile_ids", ep.ProfileIds); err != nil {
		return WorkloadEndpoint{}, err
	}
	if len(ep.ProfileIds) > 0 {
		out.Profiles = append([]string(nil), ep.ProfileIds...)
	}
	if out.Tiers, err = Tiers(ep.Tiers); err != nil {
		return WorkloadEndpoint{}, err
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

// validateHostEndpoint checks a HostEndpointUpdate. dpd does not program
// host endpoints yet, but a bad one is still reported, not swallowed.
func validateHostEndpoint(u *felix.HostEndpointUpdate) error {
	if err := required("host endpoint id", u.GetId().GetEndpointId()); err != nil {
		return err
	}
	ep := u.GetEndpoint()
	if ep == nil {
		return errors.New("endpoint: missing")
	}
	if _, err := addrList("expected_ipv4_addrs", ep.ExpectedIpv4Addrs); err != nil {
		return err
	}
	if _, err := addrList("expected_ipv6_addrs", ep.ExpectedIpv6Addrs); err != nil {
		return err
	}
	if err := nonEmpty("profile_ids", ep.ProfileIds); err != nil {
		return err
	}
	for _, ts := range []struct {
		field string
		tiers []*felix.TierInfo
	}{{"tiers", ep.Tiers}, {"untracked_tiers", ep.UntrackedTiers}, {"pre_dnat_tiers", ep.PreDnatTiers}, {"forward_tiers", ep.ForwardTiers}} {
		if _, err := Tiers(ts.tiers); err != nil {
			return fmt.Errorf("%s: %w", ts.field, err)
		}
	}
	return nil
}
