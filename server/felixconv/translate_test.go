package felixconv

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

func payloadOneof() protoreflect.OneofDescriptor {
	return (&felix.ToDataplane{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
}

// withEmptyPayload returns a ToDataplane whose payload case fd holds an
// empty (but present) message.
func withEmptyPayload(fd protoreflect.FieldDescriptor) *felix.ToDataplane {
	msg := &felix.ToDataplane{SequenceNumber: 9}
	m := msg.ProtoReflect()
	m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
	return msg
}

// TestTranslateEveryPayloadCase walks every oneof case of the proto, so a
// case added to felixbackend.proto without a rule in translate*.go fails, and
// proves that empty and nil payload bodies are reported, not panicked on.
func TestTranslateEveryPayloadCase(t *testing.T) {
	fields := payloadOneof().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		t.Run(string(fd.Name()), func(t *testing.T) {
			msg := withEmptyPayload(fd)
			if k := PayloadKind(msg); k != string(fd.Name()) {
				t.Errorf("PayloadKind = %q", k)
			}
			u, err := Translate(msg)
			checkHandled(t, err)
			if err == nil && u.Kind() != string(fd.Name()) {
				t.Errorf("update kind %q", u.Kind())
			}

			// The same wrapper with a nil body (only Go code can build it).
			wrapper := reflect.New(reflect.TypeOf(msg.Payload).Elem()).Interface()
			reflect.ValueOf(msg).Elem().FieldByName("Payload").Set(reflect.ValueOf(wrapper))
			checkHandled(t, Validate(msg))
		})
	}
}

func checkHandled(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if err != nil && !errors.As(err, &e) {
		t.Fatalf("Validate returned %T, want *Error", err)
	}
	if e != nil && e.Reason == errUnhandled.Error() {
		t.Fatalf("payload case has no translation rule")
	}
}

func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v (%T), want *Error", err, err)
	}
	return e
}

func TestTranslateOddMessages(t *testing.T) {
	if err := Validate(nil); err == nil {
		t.Error("nil message accepted")
	}
	u, err := Translate(&felix.ToDataplane{SequenceNumber: 3})
	if err != nil {
		t.Errorf("message without payload: %v", err)
	} else if _, ok := u.(*model.Unknown); !ok || u.Sequence() != 3 || u.Kind() != KindUnknown {
		t.Errorf("message without payload: %T %+v", u, u)
	}
	typedNil := &felix.ToDataplane{Payload: (*felix.ToDataplane_RouteUpdate)(nil)}
	if err := Validate(typedNil); err == nil || !strings.Contains(err.Error(), "payload wrapper is nil") {
		t.Errorf("typed-nil wrapper: %v", err)
	}
	if k := PayloadKind(nil); k != KindUnknown {
		t.Errorf("PayloadKind(nil) = %q", k)
	}
	if k := PayloadKind(&felix.ToDataplane{}); k != KindUnknown {
		t.Errorf("PayloadKind(empty) = %q", k)
	}
}

// TestTranslateErrors: each payload's checks, with the reasons the
// controller's operator reads, and the endpoint named when its id is valid.
func TestTranslateErrors(t *testing.T) {
	wep := func(f func(u *felix.WorkloadEndpointUpdate)) *felix.ToDataplane {
		u := validWEP()
		f(u)
		return &felix.ToDataplane{SequenceNumber: 42, Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: u}}
	}
	td := func(p any) *felix.ToDataplane {
		msg := &felix.ToDataplane{SequenceNumber: 7}
		reflect.ValueOf(msg).Elem().FieldByName("Payload").Set(reflect.ValueOf(p))
		return msg
	}
	podA := &model.WorkloadID{Orchestrator: "k8s", Workload: "default/pod-a", Endpoint: "eth0"}
	tests := []struct {
		name     string
		msg      *felix.ToDataplane
		kind     string
		reason   string // "" means valid
		endpoint *model.WorkloadID
	}{
		{"in sync", td(&felix.ToDataplane_InSync{InSync: &felix.InSync{}}), "in_sync", "", nil},
		{"config", td(&felix.ToDataplane_ConfigUpdate{ConfigUpdate: &felix.ConfigUpdate{Config: map[string]string{"a": "b"}}}), "config_update", "", nil},
		{"encap", td(&felix.ToDataplane_Encapsulation{}), "encapsulation", "", nil},

		{"wep ok", wep(func(*felix.WorkloadEndpointUpdate) {}), "workload_endpoint_update", "", nil},
		{"wep bad id", wep(func(u *felix.WorkloadEndpointUpdate) { u.Id.EndpointId = "" }), "workload_endpoint_update", "endpoint_id", nil},
		{"wep bad mac names endpoint", wep(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Mac = "zz" }), "workload_endpoint_update", "mac", podA},
		{"wep no iface", wep(func(u *felix.WorkloadEndpointUpdate) { u.Endpoint.Name = "" }), "workload_endpoint_update", "interface", podA},
		{"wep remove ok", td(&felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{Id: wepID()}}), "workload_endpoint_remove", "", nil},
		{"wep remove no id", td(&felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{}}), "workload_endpoint_remove", "endpoint id: missing", nil},

		{"hep ok", td(&felix.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: &felix.HostEndpointUpdate{
			Id: &felix.HostEndpointID{EndpointId: "eth0"}, Endpoint: &felix.HostEndpoint{Name: "eth0", ExpectedIpv4Addrs: []string{"192.168.0.1"},
				PreDnatTiers: []*felix.TierInfo{{Name: "t"}}}}}), "host_endpoint_update", "", nil},
		{"hep no id", td(&felix.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: &felix.HostEndpointUpdate{Endpoint: &felix.HostEndpoint{}}}), "host_endpoint_update", "host endpoint id", nil},
		{"hep bad addr", td(&felix.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: &felix.HostEndpointUpdate{
			Id: &felix.HostEndpointID{EndpointId: "e"}, Endpoint: &felix.HostEndpoint{ExpectedIpv6Addrs: []string{"x"}}}}), "host_endpoint_update", "expected_ipv6_addrs[0]", nil},
		{"hep bad tier", td(&felix.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: &felix.HostEndpointUpdate{
			Id: &felix.HostEndpointID{EndpointId: "e"}, Endpoint: &felix.HostEndpoint{ForwardTiers: []*felix.TierInfo{{}}}}}), "host_endpoint_update", "forward_tiers", nil},
		{"hep remove", td(&felix.ToDataplane_HostEndpointRemove{HostEndpointRemove: &felix.HostEndpointRemove{}}), "host_endpoint_remove", "host endpoint id", nil},

		{"ipset ok", td(&felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: "s:a", Type: felix.IPSetUpdate_NET, Members: []string{"10.0.0.0/8"}}}), "ipset_update", "", nil},
		{"ipset no id", td(&felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Members: []string{"10.0.0.1"}}}), "ipset_update", "ip set id", nil},
		{"ipset wrong syntax for type", td(&felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: "s", Type: felix.IPSetUpdate_IP_AND_PORT, Members: []string{"10.0.0.1"}}}), "ipset_update", "member 0", nil},
		{"delta any syntax", td(&felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{Id: "s",
			AddedMembers: []string{"10.0.0.1", "10.0.0.0/8", "10.0.0.1,tcp:80"}, RemovedMembers: []string{"fd00::1"}}}), "ipset_delta_update", "", nil},
		{"delta bad removed", td(&felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{Id: "s", RemovedMembers: []string{"a,b"}}}), "ipset_delta_update", "removed_members[0]", nil},
		{"delta no id", td(&felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{}}), "ipset_delta_update", "ip set id", nil},
		{"ipset remove", td(&felix.ToDataplane_IpsetRemove{IpsetRemove: &felix.IPSetRemove{}}), "ipset_remove", "ip set id", nil},

		{"policy ok", td(&felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{Id: &felix.PolicyID{Name: "p"}, Policy: &felix.Policy{}}}), "active_policy_update", "", nil},
		{"policy bad rule", td(&felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{Id: &felix.PolicyID{Name: "p"},
			Policy: &felix.Policy{InboundRules: []*felix.Rule{{Action: "allow"}, {Action: "allow", Protocol: pname("bogus")}}}}}), "active_policy_update", "inbound_rules: rule 1: protocol", nil},
		{"policy remove", td(&felix.ToDataplane_ActivePolicyRemove{ActivePolicyRemove: &felix.ActivePolicyRemove{Id: &felix.PolicyID{}}}), "active_policy_remove", "policy name", nil},
		{"profile ok", td(&felix.ToDataplane_ActiveProfileUpdate{ActiveProfileUpdate: &felix.ActiveProfileUpdate{Id: &felix.ProfileID{Name: "p"}, Profile: &felix.Profile{}}}), "active_profile_update", "", nil},
		{"profile remove", td(&felix.ToDataplane_ActiveProfileRemove{ActiveProfileRemove: &felix.ActiveProfileRemove{}}), "active_profile_remove", "profile name", nil},

		{"route ok", td(&felix.ToDataplane_RouteUpdate{RouteUpdate: &felix.RouteUpdate{Dst: "10.0.0.0/24"}}), "route_update", "", nil},
		{"route bad", td(&felix.ToDataplane_RouteUpdate{RouteUpdate: &felix.RouteUpdate{Dst: "nope"}}), "route_update", "dst", nil},
		{"route remove bad", td(&felix.ToDataplane_RouteRemove{RouteRemove: &felix.RouteRemove{Dst: "10.0.0.0/"}}), "route_remove", "dst", nil},
		{"service ok", td(&felix.ToDataplane_ServiceUpdate{ServiceUpdate: &felix.ServiceUpdate{Name: "s", Namespace: "n"}}), "service_update", "", nil},
		{"service bad", td(&felix.ToDataplane_ServiceUpdate{ServiceUpdate: &felix.ServiceUpdate{Name: "s", Namespace: "n", Ports: []*felix.ServicePort{{Port: -1}}}}), "service_update", "ports[0]", nil},
		{"service remove", td(&felix.ToDataplane_ServiceRemove{ServiceRemove: &felix.ServiceRemove{Name: "s"}}), "service_remove", "namespace", nil},
		{"backends bad", td(&felix.ToDataplane_ServiceBackendsUpdate{ServiceBackendsUpdate: &felix.ServiceBackendsUpdate{Name: "s", Namespace: "n",
			Backends: []*felix.ServiceBackend{{Ip: "1.1.1.1", Port: 80}, {Ip: "1.1.1", Port: 80}}}}), "service_backends_update", "backends[1]", nil},
		{"backends remove", td(&felix.ToDataplane_ServiceBackendsRemove{ServiceBackendsRemove: &felix.ServiceBackendsRemove{Namespace: "n"}}), "service_backends_remove", "service name", nil},

		{"host metadata ok", td(&felix.ToDataplane_HostMetadataUpdate{HostMetadataUpdate: &felix.HostMetadataUpdate{Hostname: "n", Ipv4Addr: "192.168.0.1/24", Ipv6Addr: "fd00::1"}}), "host_metadata_update", "", nil},
		{"host metadata wrong family", td(&felix.ToDataplane_HostMetadataUpdate{HostMetadataUpdate: &felix.HostMetadataUpdate{Hostname: "n", Ipv4Addr: "fd00::1"}}), "host_metadata_update", "ipv4_addr", nil},
		{"host metadata no name", td(&felix.ToDataplane_HostMetadataUpdate{HostMetadataUpdate: &felix.HostMetadataUpdate{}}), "host_metadata_update", "hostname", nil},
		{"vtep ok", td(&felix.ToDataplane_VtepUpdate{VtepUpdate: &felix.VXLANTunnelEndpointUpdate{Node: "n", Mac: "66:00:00:00:00:01", Ipv4Addr: "10.65.1.0", ParentDeviceIp: "192.168.0.2"}}), "vtep_update", "", nil},
		{"vtep bad mac", td(&felix.ToDataplane_VtepUpdate{VtepUpdate: &felix.VXLANTunnelEndpointUpdate{Node: "n", MacV6: "66"}}), "vtep_update", "mac_v6", nil},
		{"vtep bad addr", td(&felix.ToDataplane_VtepUpdate{VtepUpdate: &felix.VXLANTunnelEndpointUpdate{Node: "n", ParentDeviceIpv6: "::g"}}), "vtep_update", "parent_device_ipv6", nil},
		{"ipam ok", td(&felix.ToDataplane_IpamPoolUpdate{IpamPoolUpdate: &felix.IPAMPoolUpdate{Id: "p", Pool: &felix.IPAMPool{Cidr: "10.65.0.0/16"}}}), "ipam_pool_update", "", nil},
		{"ipam no pool", td(&felix.ToDataplane_IpamPoolUpdate{IpamPoolUpdate: &felix.IPAMPoolUpdate{Id: "p"}}), "ipam_pool_update", "pool: missing", nil},
		{"wireguard bad", td(&felix.ToDataplane_WireguardEndpointV6Update{WireguardEndpointV6Update: &felix.WireguardEndpointV6Update{Hostname: "n", InterfaceIpv6Addr: "x"}}), "wireguard_endpoint_v6_update", "interface_ipv6_addr", nil},
		{"bgp bad cidr", td(&felix.ToDataplane_GlobalBgpConfigUpdate{GlobalBgpConfigUpdate: &felix.GlobalBGPConfigUpdate{ServiceExternalCidrs: []string{"x"}}}), "global_bgp_config_update", "service_external_cidrs[0]", nil},
		{"service account", td(&felix.ToDataplane_ServiceAccountUpdate{ServiceAccountUpdate: &felix.ServiceAccountUpdate{Id: &felix.ServiceAccountID{Name: "sa"}}}), "service_account_update", "service account namespace", nil},
		{"namespace", td(&felix.ToDataplane_NamespaceRemove{NamespaceRemove: &felix.NamespaceRemove{}}), "namespace_remove", "namespace name", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, err := Translate(tc.msg)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if u.Kind() != tc.kind || u.Sequence() != tc.msg.SequenceNumber {
					t.Fatalf("update %T kind %q seq %d, want %q and %d", u, u.Kind(), u.Sequence(), tc.kind, tc.msg.SequenceNumber)
				}
				return
			}
			e := asError(t, err)
			if e.Kind != tc.kind || e.Seq != tc.msg.SequenceNumber || !strings.Contains(e.Reason, tc.reason) {
				t.Errorf("got %+v, want kind %q seq %d reason containing %q", e, tc.kind, tc.msg.SequenceNumber, tc.reason)
			}
			if !reflect.DeepEqual(e.Endpoint, tc.endpoint) {
				t.Errorf("Endpoint = %v, want %v", e.Endpoint, tc.endpoint)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	e := &Error{Seq: 5, Kind: "workload_endpoint_update", Endpoint: &model.WorkloadID{Orchestrator: "k8s", Workload: "ns/p", Endpoint: "eth0"}, Reason: "mac: bad"}
	if got, want := e.Error(), "felix message 5 (workload_endpoint_update k8s/ns/p/eth0): mac: bad"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e.Endpoint = nil
	if got, want := e.Error(), "felix message 5 (workload_endpoint_update): mac: bad"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
