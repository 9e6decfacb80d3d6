package felixwire

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/dpd-dev/dpd/proto/felix"
)

// What MarshalLegacy writes, Decode reads back unchanged, and recognises
// as the older generation wherever the two differ.
func TestLegacyRoundTrip(t *testing.T) {
	ids := []*felix.PolicyID{
		{Name: "t1.allow", Kind: KindGlobalNetworkPolicy},
		{Name: "t1.try", Kind: KindStagedGlobalNetworkPolicy},
		{Name: "default.np", Namespace: "prod", Kind: KindNetworkPolicy},
		{Name: "default.snp", Namespace: "prod", Kind: KindStagedNetworkPolicy},
		{Name: "web", Namespace: "prod", Kind: KindKubernetesNetworkPolicy},
		{Name: "try-web", Namespace: "prod", Kind: KindStagedKubernetesNetworkPolicy},
	}
	var msgs []*felix.ToDataplane
	for i, id := range ids {
		msgs = append(msgs, &felix.ToDataplane{SequenceNumber: uint64(i + 1), Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
			Id: id, Policy: &felix.Policy{InboundRules: []*felix.Rule{{Action: "allow"}}, Tier: "t1", Namespace: id.Namespace}}}})
	}
	msgs = append(msgs,
		&felix.ToDataplane{SequenceNumber: 10, Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
			Id: wepIDMsg(), Endpoint: &felix.WorkloadEndpoint{Name: "cali1", Ipv4Nets: []string{"10.65.0.1/32"},
				Tiers: []*felix.TierInfo{{Name: "t1", DefaultAction: "Pass", IngressPolicies: ids, EgressPolicies: ids[:1]}}}}}},
		&felix.ToDataplane{SequenceNumber: 11, Payload: &felix.ToDataplane_ActivePolicyRemove{ActivePolicyRemove: &felix.ActivePolicyRemove{Id: ids[4]}}},
		&felix.ToDataplane{SequenceNumber: 12, Payload: &felix.ToDataplane_HostMetadataUpdate{HostMetadataUpdate: &felix.HostMetadataUpdate{
			Hostname: "n", Ipv4Addr: "192.0.2.1", Ipv6Addr: "2001:db8::1", Asnumber: "64512", Labels: map[string]string{"a": "b"}}}},
		&felix.ToDataplane{SequenceNumber: 13, Payload: &felix.ToDataplane_RouteUpdate{RouteUpdate: &felix.RouteUpdate{Types: felix.RouteType(1 | 16), Dst: "10.65.1.0/26"}}},
		&felix.ToDataplane{SequenceNumber: 14, Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: "s", Members: []string{"10.0.0.1"}}}},
		&felix.ToDataplane{SequenceNumber: 15, Payload: &felix.ToDataplane_HostMetadataRemove{HostMetadataRemove: &felix.HostMetadataRemove{Hostname: "n"}}},
		&felix.ToDataplane{SequenceNumber: 16, Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}},
	)
	d := NewDecoder()
	for _, m := range msgs {
		b, err := MarshalLegacy(m)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		r, err := d.Decode(b)
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		if diff := cmp.Diff(m, r.Msg, protocmp.Transform()); diff != "" {
			t.Fatalf("round trip (-sent +decoded):\n%s", diff)
		}
		switch m.Payload.(type) {
		case *felix.ToDataplane_ActivePolicyUpdate, *felix.ToDataplane_ActivePolicyRemove, *felix.ToDataplane_WorkloadEndpointUpdate,
			*felix.ToDataplane_HostMetadataUpdate, *felix.ToDataplane_HostMetadataRemove:
			if r.Gen != Legacy {
				t.Fatalf("%v recognised as %v", m, r.Gen)
			}
		}
	}
}

func TestUpPolicyIDRejects(t *testing.T) {
	for _, name := range []string{"", "/x", "a/b/c", "ns/staged:", "staged:", "ns/knp.default."} {
		if id, err := upPolicyID(name); err == nil {
			t.Errorf("upPolicyID(%q) = %v, want an error", name, id)
		}
	}
}
