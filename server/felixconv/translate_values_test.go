package felixconv

import (
	"net"
	"net/netip"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// TestTranslateValues: what the engine receives for each kind of message,
// field by field.
func TestTranslateValues(t *testing.T) {
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr
	member := func(p string) model.IPSetMember { return model.IPSetMember{Prefix: pfx(p)} }
	tests := []struct {
		msg  proto.Message
		want model.Update
	}{
		{&felix.ConfigUpdate{Config: map[string]string{"a": "b"}}, &model.ConfigUpdate{Config: map[string]string{"a": "b"}}},
		{&felix.IPSetUpdate{Id: "s", Type: felix.IPSetUpdate_IP_AND_PORT, Members: []string{"10.0.0.1,tcp:80"}},
			&model.IPSetUpdate{ID: "s", Type: model.IPSetIPAndPort, Members: []model.IPSetMember{
				{Prefix: pfx("10.0.0.1/32"), Proto: model.ProtoTCP, Port: 80}}}},
		{&felix.IPSetDeltaUpdate{Id: "s", AddedMembers: []string{"10.0.0.1", "10.1.2.3/8"}, RemovedMembers: []string{"fd00::1"}},
			&model.IPSetDeltaUpdate{ID: "s", Added: []model.IPSetMember{member("10.0.0.1/32"), member("10.0.0.0/8")},
				Removed: []model.IPSetMember{member("fd00::1/128")}}},
		{&felix.IPSetRemove{Id: "s"}, &model.IPSetRemove{ID: "s"}},
		{&felix.ActivePolicyRemove{Id: &felix.PolicyID{Name: "p", Namespace: "ns", Kind: "NetworkPolicy"}},
			&model.ActivePolicyRemove{Key: model.PolicyKey{Kind: "NetworkPolicy", Namespace: "ns", Name: "p"}}},
		{&felix.ActiveProfileRemove{Id: &felix.ProfileID{Name: "kns.a"}}, &model.ActiveProfileRemove{Name: "kns.a"}},
		{validWEP(), &model.WorkloadEndpointUpdate{Endpoint: model.WorkloadEndpoint{
			ID: model.WorkloadID{Orchestrator: "k8s", Workload: "default/pod-a", Endpoint: "eth0"}, Iface: "cali1234",
			MAC:      net.HardwareAddr{0xee, 0xee, 0xee, 0xee, 0xee, 0xee},
			IPv4Nets: []netip.Prefix{pfx("10.65.0.2/32")}, IPv6Nets: []netip.Prefix{pfx("fd00:65::2/128")},
			Profiles: []string{"kns.default"},
			Tiers: []model.TierRef{
				{Name: "default", DefaultAction: model.ActionDeny,
					Ingress: []model.PolicyKey{{Kind: "NetworkPolicy", Namespace: "default", Name: "allow-web"}},
					Egress:  []model.PolicyKey{{Kind: "GlobalNetworkPolicy", Name: "allow-dns"}}},
				{Name: "security", DefaultAction: model.ActionPass, Ingress: []model.PolicyKey{{Name: "quarantine"}}},
			}}}},
		{&felix.WorkloadEndpointRemove{Id: wepID()},
			&model.WorkloadEndpointRemove{ID: model.WorkloadID{Orchestrator: "k8s", Workload: "default/pod-a", Endpoint: "eth0"}}},
		{&felix.HostEndpointUpdate{Id: &felix.HostEndpointID{EndpointId: "h"}, Endpoint: &felix.HostEndpoint{
			Name: "eth0", ExpectedIpv4Addrs: []string{"192.168.0.1"}, ProfileIds: []string{"p"},
			PreDnatTiers: []*felix.TierInfo{{Name: "t", IngressPolicies: []*felix.PolicyID{{Name: "x"}}}}}},
			&model.HostEndpointUpdate{Endpoint: model.HostEndpoint{ID: "h", Iface: "eth0",
				ExpectedIPv4: []netip.Addr{addr("192.168.0.1")}, Profiles: []string{"p"},
				PreDNATTiers: []model.TierRef{{Name: "t", DefaultAction: model.ActionDeny, Ingress: []model.PolicyKey{{Name: "x"}}}}}}},
		{&felix.HostEndpointRemove{Id: &felix.HostEndpointID{EndpointId: "h"}}, &model.HostEndpointRemove{ID: "h"}},
		{&felix.RouteRemove{Dst: "10.65.1.7/24"}, &model.RouteRemove{Dst: pfx("10.65.1.0/24")}},
		{&felix.ServiceRemove{Namespace: "n", Name: "s"}, &model.ServiceRemove{Key: model.ServiceKey{Namespace: "n", Name: "s"}}},
		{&felix.ServiceBackendsUpdate{Namespace: "n", Name: "s", Backends: []*felix.ServiceBackend{{Ip: "10.65.0.2", Port: 80, Protocol: "udp", Ready: true}}},
			&model.ServiceBackendsUpdate{Key: model.ServiceKey{Namespace: "n", Name: "s"},
				Backends: []model.Backend{{Addr: addr("10.65.0.2"), Port: 80, Protocol: model.ProtoUDP, Ready: true}}}},
		{&felix.ServiceBackendsRemove{Namespace: "n", Name: "s"}, &model.ServiceBackendsRemove{Key: model.ServiceKey{Namespace: "n", Name: "s"}}},
		{&felix.HostMetadataUpdate{Hostname: "n1", Ipv4Addr: "192.168.0.1/24", Ipv6Addr: "fd00::1"},
			&model.HostMetadataUpdate{Host: model.HostMetadata{Hostname: "n1", IPv4Addr: addr("192.168.0.1"), IPv6Addr: addr("fd00::1")}}},
		{&felix.HostMetadataRemove{Hostname: "n1"}, &model.HostMetadataRemove{Hostname: "n1"}},
		{&felix.VXLANTunnelEndpointUpdate{Node: "n2", Mac: "66:00:00:00:00:02", Ipv4Addr: "10.65.1.0", ParentDeviceIp: "192.168.0.2"},
			&model.VTEPUpdate{VTEP: model.VTEP{Node: "n2", MAC: net.HardwareAddr{0x66, 0, 0, 0, 0, 2},
				IPv4Addr: addr("10.65.1.0"), ParentDeviceIP: addr("192.168.0.2")}}},
		{&felix.VXLANTunnelEndpointRemove{Node: "n2"}, &model.VTEPRemove{Node: "n2"}},
		{&felix.IPAMPoolUpdate{Id: "pool", Pool: &felix.IPAMPool{Cidr: "10.65.0.0/16"}}, &model.StoredUpdate{Object: model.StoredIPAMPool, Key: "pool"}},
		{&felix.IPAMPoolRemove{Id: "pool"}, &model.StoredRemove{Object: model.StoredIPAMPool, Key: "pool"}},
		{&felix.ServiceAccountUpdate{Id: &felix.ServiceAccountID{Namespace: "ns", Name: "sa"}}, &model.StoredUpdate{Object: model.StoredServiceAccount, Key: "ns/sa"}},
		{&felix.ServiceAccountRemove{Id: &felix.ServiceAccountID{Namespace: "ns", Name: "sa"}}, &model.StoredRemove{Object: model.StoredServiceAccount, Key: "ns/sa"}},
		{&felix.NamespaceUpdate{Id: &felix.NamespaceID{Name: "ns"}}, &model.StoredUpdate{Object: model.StoredNamespace, Key: "ns"}},
		{&felix.WireguardEndpointV6Remove{Hostname: "n3"}, &model.StoredRemove{Object: model.StoredWireguardV6, Key: "n3"}},
		{&felix.GlobalBGPConfigUpdate{}, &model.StoredUpdate{Object: model.StoredGlobalBGP}},
		{&felix.Encapsulation{VxlanEnabled: true}, &model.StoredUpdate{Object: model.StoredEncapsulation}},
	}
	for i, tc := range tests {
		msg := testutil.ToDataplane(tc.msg)
		msg.SequenceNumber = uint64(100 + i)
		got, err := Translate(msg)
		if err != nil {
			t.Errorf("%s: %v", PayloadKind(msg), err)
			continue
		}
		want := model.WithSeq(tc.want, msg.SequenceNumber)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got  %+v\n want %+v", PayloadKind(msg), got, want)
		}
		if got.Kind() != PayloadKind(msg) {
			t.Errorf("%s: kind %q", PayloadKind(msg), got.Kind())
		}
	}
}
