package felixconv

import (
	"net"
	"net/netip"
	"reflect"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

func wepID() *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "default/pod-a", EndpointId: "eth0"}
}

func validWEP() *felix.WorkloadEndpointUpdate {
	return &felix.WorkloadEndpointUpdate{
		Id: wepID(),
		Endpoint: &felix.WorkloadEndpoint{
			State:      "active",
			Name:       "cali1234",
			Mac:        "ee:ee:ee:ee:ee:ee",
			ProfileIds: []string{"kns.default"},
			Ipv4Nets:   []string{"10.65.0.2/32"},
			Ipv6Nets:   []string{"fd00:65::2"},
			Ipv4Nat:    []*felix.NatInfo{{ExtIp: "203.0.113.5", IntIp: "10.65.0.2"}},
			Tiers: []*felix.TierInfo{{
				Name:            "default",
				IngressPolicies: []*felix.PolicyID{{Name: "allow-web", Namespace: "default", Kind: "NetworkPolicy"}},
				EgressPolicies:  []*felix.PolicyID{{Name: "allow-dns", Kind: "GlobalNetworkPolicy"}},
			}, {
				Name:            "security",
				IngressPolicies: []*felix.PolicyID{{Name: "quarantine"}},
				DefaultAction:   "Pass",
			}},
		},
	}
}

func TestEndpoint(t *testing.T) {
	tests := []struct {
		name string
		id   *felix.WorkloadEndpointID
		err  string
	}{
		{"ok", wepID(), ""},
		{"nil", nil, "missing"},
		{"no orchestrator", &felix.WorkloadEndpointID{WorkloadId: "w", EndpointId: "e"}, "orchestrator_id"},
		{"no workload", &felix.WorkloadEndpointID{OrchestratorId: "k8s", EndpointId: "e"}, "workload_id"},
		{"no endpoint", &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "w"}, "endpoint_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Endpoint(tc.id)
			checkErr(t, err, tc.err)
			if err == nil && got != (model.WorkloadID{Orchestrator: "k8s", Workload: "default/pod-a", Endpoint: "eth0"}) {
				t.Errorf("got %v", got)
			}
		})
	}
}

func TestTierDefaultAction(t *testing.T) {
	tests := []struct {
		in   string
		want model.Action
		err  bool
	}{
		{"", model.ActionDeny, false},
		{"Deny", model.ActionDeny, false},
		{"deny", model.ActionDeny, false},
		{"Pass", model.ActionPass, false},
		{"PASS", model.ActionPass, false},
		{"Allow", 0, true},
		{"next-tier", 0, true},
	}
	for _, tc := range tests {
		got, err := TierDefaultAction(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("TierDefaultAction(%q) = %v, %v; want %v, err=%t", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestWorkloadEndpointUpdate(t *testing.T) {
	got, err := WorkloadEndpointUpdate(validWEP())
	if err != nil {
		t.Fatal(err)
	}
	want := model.WorkloadEndpoint{
		ID:       model.WorkloadID{Orchestrator: "k8s", Workload: "default/pod-a", Endpoint: "eth0"},
		Iface:    "cali1234",
		MAC:      net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee},
		IPv4Nets: []netip.Prefix{netip.MustParsePrefix("10.65.0.2/32")},
		IPv6Nets: []netip.Prefix{netip.MustParsePrefix("fd00:65::2/128")},
		Profiles: []string{"kns.default"},
		Tiers: []model.TierRef{
			{Name: "default", DefaultAction: model.ActionDeny,
				Ingress: []model.PolicyKey{{Kind: "NetworkPolicy", Namespace: "default", Name: "allow-web"}},
				Egress:  []model.PolicyKey{{Kind: "GlobalNetworkPolicy", Name: "allow-dns"}}},
			{Name: "security", DefaultAction: model.ActionPass, Ingress: []model.PolicyKey{{Name: "quarantine"}}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if s := want.Tiers[0].Ingress[0].String(); s != "NetworkPolicy:default/allow-web" {
		t.Errorf("PolicyKey.String() = %q", s)
	}

	mod := func(f func(u *felix.WorkloadEndpointUpdate)) *felix.WorkloadEndpointUpdate {
		u := validWEP()
		f(u)
		return u
	}
	errs := []struct {
		name string
		u    *felix.WorkloadEndpointUpdate
		err  string
	}{
		{"nil", nil, "nil update"},
		{"no id", mod(func(u *felix.WorkloadEndpointUpdate) { u.Id = nil }), "endpoint id: missing"},
		{"no endpoint", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint = nil }), "endpoint: missing"},
		{"no iface", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Name = "" }), "interface"},
		{"bad mac", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Mac = "ee:ee" }), "mac"},
		{"eui64 mac", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Mac = "00:00:00:00:fe:80:00:00" }), "not 48-bit"},
		{"bad v4 net", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Ipv4Nets = []string{"10.65.0.300/32"} }), "ipv4_nets[0]"},
		{"v6 in v4 nets", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Ipv4Nets = []string{"fd00::1/128"} }), "is not IPv4"},
		{"v4 in v6 nets", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Ipv6Nets = []string{"10.0.0.1"} }), "is not IPv6"},
		{"bad nat", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Ipv4Nat[0].ExtIp = "" }), "ipv4_nat[0].ext_ip"},
		{"nil nat", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Ipv6Nat = []*felix.NatInfo{nil} }), "ipv6_nat[0]: nil"},
		{"bad spoof prefix", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.AllowSpoofedSourcePrefixes = []string{"x"} }), "allow_spoofed"},
		{"empty profile", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.ProfileIds = []string{""} }), "profile_ids[0]"},
		{"tier without name", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Tiers[0].Name = "" }), "tier 0: name"},
		{"nil tier", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Tiers[1] = nil }), "tier 1: nil"},
		{"bad default action", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Tiers[0].DefaultAction = "Allow" }), "tier default action"},
		{"policy without name", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Tiers[0].EgressPolicies[0].Name = "" }),
			"tier default: egress_policies[0]: policy name"},
		{"nil policy id", mod(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Tiers[1].IngressPolicies[0] = nil }),
			"ingress_policies[0]: policy id: missing"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			_, err := WorkloadEndpointUpdate(tc.u)
			checkErr(t, err, tc.err)
		})
	}
}

func TestActivePolicyAndProfile(t *testing.T) {
	u := &felix.ActivePolicyUpdate{
		Id: &felix.PolicyID{Name: "p", Namespace: "ns", Kind: "NetworkPolicy"},
		Policy: &felix.Policy{
			Tier:          "default",
			InboundRules:  []*felix.Rule{{Action: "allow", RuleId: "in"}},
			OutboundRules: []*felix.Rule{{Action: "deny", RuleId: "out"}},
			PreDnat:       true,
		},
	}
	got, err := ActivePolicy(u)
	if err != nil {
		t.Fatal(err)
	}
	want := model.Policy{
		Key: model.PolicyKey{Kind: "NetworkPolicy", Namespace: "ns", Name: "p"}, Tier: "default", PreDNAT: true,
		Inbound:  []model.Rule{{ID: "in", Action: model.ActionAllow}},
		Outbound: []model.Rule{{ID: "out", Action: model.ActionDeny}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for name, tc := range map[string]struct {
		u   *felix.ActivePolicyUpdate
		err string
	}{
		"nil":          {nil, "nil update"},
		"no id":        {&felix.ActivePolicyUpdate{Policy: &felix.Policy{}}, "policy id: missing"},
		"no name":      {&felix.ActivePolicyUpdate{Id: &felix.PolicyID{Kind: "x"}, Policy: &felix.Policy{}}, "policy name"},
		"no body":      {&felix.ActivePolicyUpdate{Id: &felix.PolicyID{Name: "p"}}, "policy: missing"},
		"bad outbound": {&felix.ActivePolicyUpdate{Id: &felix.PolicyID{Name: "p"}, Policy: &felix.Policy{OutboundRules: []*felix.Rule{{Action: "x"}}}}, "outbound_rules: rule 0"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ActivePolicy(tc.u)
			checkErr(t, err, tc.err)
		})
	}

	prof, err := ActiveProfile(&felix.ActiveProfileUpdate{
		Id:      &felix.ProfileID{Name: "kns.default"},
		Profile: &felix.Profile{InboundRules: []*felix.Rule{{Action: "allow", RuleId: "r"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if prof.Name != "kns.default" || len(prof.Inbound) != 1 || prof.Outbound != nil {
		t.Errorf("profile %+v", prof)
	}
	if _, err := ActiveProfile(&felix.ActiveProfileUpdate{Id: &felix.ProfileID{Name: "p"}}); err == nil {
		t.Error("profile without body accepted")
	}
	if _, err := ActiveProfile(&felix.ActiveProfileUpdate{Profile: &felix.Profile{}}); err == nil {
		t.Error("profile without name accepted")
	}
	if _, err := ActiveProfile(&felix.ActiveProfileUpdate{Id: &felix.ProfileID{Name: "p"},
		Profile: &felix.Profile{InboundRules: []*felix.Rule{{Action: "allow", SrcNet: []string{"bad"}}}}}); err == nil {
		t.Error("profile with bad rule accepted")
	}
}
