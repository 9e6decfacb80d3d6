package model

import (
	"net/netip"
	"strings"
	"testing"
)

func TestIPSetTypeCheck(t *testing.T) {
	addr := IPSetMember{Prefix: netip.MustParsePrefix("10.0.0.1/32")}
	v6 := IPSetMember{Prefix: netip.MustParsePrefix("fd00::1/128")}
	net := IPSetMember{Prefix: netip.MustParsePrefix("10.0.0.0/8")}
	port := IPSetMember{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Proto: ProtoTCP, Port: 80}
	for _, tc := range []struct {
		typ  IPSetType
		m    IPSetMember
		want string // "" fits
	}{
		{IPSetIP, addr, ""}, {IPSetIP, v6, ""}, {IPSetIP, net, "is a network"}, {IPSetIP, port, "has a port"},
		{IPSetNet, addr, ""}, {IPSetNet, net, ""}, {IPSetNet, port, "has a port"},
		{IPSetIPAndPort, port, ""}, {IPSetIPAndPort, addr, "no protocol and port"}, {IPSetIPAndPort, net, "no protocol and port"},
		{IPSetType(9), addr, "unknown ip set type 9"},
	} {
		err := tc.typ.Check(tc.m)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("type %d, member %+v: %v, want %q", tc.typ, tc.m, err, tc.want)
		}
	}
}

func TestUpdateKindsAndSequence(t *testing.T) {
	for u, want := range map[Update]string{
		&StoredUpdate{Object: StoredIPAMPool}:       "ipam_pool_update",
		&StoredRemove{Object: StoredWireguardV6}:    "wireguard_endpoint_v6_remove",
		&StoredUpdate{Object: StoredEncapsulation}:  "encapsulation",
		&StoredUpdate{Object: StoredGlobalBGP}:      "global_bgp_config_update",
		&StoredRemove{Object: StoredServiceAccount}: "service_account_remove",
		&WorkloadEndpointUpdate{}:                   "workload_endpoint_update",
		&Unknown{}:                                  KindUnknown,
		&StoredUpdate{Object: StoredKind(0)}:        "stored(0)_update",
	} {
		if got := u.Kind(); got != want {
			t.Errorf("%T kind %q, want %q", u, got, want)
		}
		if WithSeq(u, 7).Sequence() != 7 {
			t.Errorf("%T: WithSeq did not set the sequence", u)
		}
	}
	r := Rejection{Seq: 3, Kind: "workload_endpoint_update", Endpoint: &WorkloadID{"k8s", "ns/p", "eth0"}, Reason: "mac: bad"}
	if got, want := r.String(), "message 3 (workload_endpoint_update k8s/ns/p/eth0): mac: bad"; got != want {
		t.Errorf("Rejection = %q, want %q", got, want)
	}
}
