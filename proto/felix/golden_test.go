package felix_test

// Golden wire tests: each case is encoded by hand with protowire from the
// field numbers of Calico's upstream felixbackend.proto (see
// docs/felix-proto-provenance.md), never produced by proto.Marshal. If a
// field number or type in felixbackend.proto drifts from upstream, the
// decode below no longer yields the expected value (or leaves unknown
// fields). Fields are written in the order Go's deterministic Marshal emits
// them: plain fields by number, then oneof members by number (so
// sequence_number precedes the payload), and the re-encode must give back
// the identical bytes.

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/proto/felix"
)

// Upstream field numbers used below, named so the encodings read like the
// upstream .proto.
const (
	toDPSeq            = 15
	toDPIPSetDelta     = 3
	toDPPolicyUpdate   = 7
	toDPWorkloadUpdate = 11
	toDPRouteUpdate    = 23
	toDPServiceUpdate  = 31

	fromDPSeq          = 8
	fromDPWEPStatus    = 6
	fromDPDataplaneSyn = 10
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func str(num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
}

func varint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

// sub encodes a nested message field from its already-encoded fields.
func sub(num protowire.Number, fields ...[]byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), cat(fields...))
}

func wepID() []byte {
	// WorkloadEndpointID: orchestrator_id=2, workload_id=3, endpoint_id=4.
	return cat(str(2, "k8s"), str(3, "default/pod-a"), str(4, "eth0"))
}

func wepIDMsg() *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "default/pod-a", EndpointId: "eth0"}
}

type goldenCase struct {
	name  string
	wire  []byte
	empty proto.Message // a fresh message of the right type to decode into
	want  proto.Message
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{
			name: "workload endpoint update with tiers",
			wire: cat(
				varint(toDPSeq, 101),
				sub(toDPWorkloadUpdate,
					sub(1, wepID()), // id
					sub(5, // endpoint
						str(1, "active"),
						str(2, "cali1234abcd"),
						str(3, "ee:ee:ee:ee:ee:ee"),
						str(4, "kns.default"),
						str(5, "10.65.0.2/32"),
						str(6, "fd00:65::2/128"),
						sub(7, // tiers[0]
							str(1, "default"),
							sub(2, str(2, "knp.default.allow-web"), str(3, "default"), str(4, "NetworkPolicy")),
							sub(3, str(2, "allow-dns"), str(4, "GlobalNetworkPolicy")),
							str(4, "Deny"),
						),
						sub(7, // tiers[1]
							str(1, "security"),
							sub(2, str(2, "quarantine"), str(4, "GlobalNetworkPolicy")),
							str(4, "Pass"),
						),
					),
				),
			),
			empty: &felix.ToDataplane{},
			want: &felix.ToDataplane{
				SequenceNumber: 101,
				Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
					Id: wepIDMsg(),
					Endpoint: &felix.WorkloadEndpoint{
						State:      "active",
						Name:       "cali1234abcd",
						Mac:        "ee:ee:ee:ee:ee:ee",
						ProfileIds: []string{"kns.default"},
						Ipv4Nets:   []string{"10.65.0.2/32"},
						Ipv6Nets:   []string{"fd00:65::2/128"},
						Tiers: []*felix.TierInfo{
							{
								Name:            "default",
								IngressPolicies: []*felix.PolicyID{{Name: "knp.default.allow-web", Namespace: "default", Kind: "NetworkPolicy"}},
								EgressPolicies:  []*felix.PolicyID{{Name: "allow-dns", Kind: "GlobalNetworkPolicy"}},
								DefaultAction:   "Deny",
							},
							{
								Name:            "security",
								IngressPolicies: []*felix.PolicyID{{Name: "quarantine", Kind: "GlobalNetworkPolicy"}},
								DefaultAction:   "Pass",
							},
						},
					},
				}},
			},
		},
		{
			name: "active policy update with negated and ICMP rules",
			wire: cat(
				varint(toDPSeq, 102),
				sub(toDPPolicyUpdate,
					sub(1, str(2, "allow-ping"), str(3, "prod"), str(4, "NetworkPolicy")), // id
					sub(2, // policy
						sub(1, // inbound_rules[0]
							str(1, "allow"),
							varint(2, 4),                       // ip_version IPV4
							sub(3, str(2, "icmp")),             // protocol name
							str(4, "10.0.0.0/8"),               // src_net
							sub(102, varint(1, 17)),            // not_protocol number
							str(103, "10.1.0.0/16"),            // not_src_net
							str(201, "rule-ping-1"),            // rule_id
							sub(9, varint(1, 3), varint(2, 4)), // oneof icmp_type_code
							varint(107, 5),                     // oneof not_icmp_type
						),
						sub(2, // outbound_rules[0]
							str(1, "deny"),
							sub(3, varint(1, 6)),                       // protocol number
							sub(7, varint(1, 80), varint(2, 80)),       // dst_ports[0]
							sub(7, varint(1, 8000), varint(2, 8080)),   // dst_ports[1]
							str(11, "s:dst-set"),                       // dst_ip_set_ids
							sub(106, varint(1, 8081), varint(2, 8081)), // not_dst_ports
							str(201, "rule-deny-web"),
						),
						str(5, "prod"),    // namespace
						str(8, "default"), // tier
					),
				),
			),
			empty: &felix.ToDataplane{},
			want: &felix.ToDataplane{
				SequenceNumber: 102,
				Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
					Id: &felix.PolicyID{Name: "allow-ping", Namespace: "prod", Kind: "NetworkPolicy"},
					Policy: &felix.Policy{
						InboundRules: []*felix.Rule{{
							Action:      "allow",
							IpVersion:   felix.IPVersion_IPV4,
							Protocol:    &felix.Protocol{NumberOrName: &felix.Protocol_Name{Name: "icmp"}},
							SrcNet:      []string{"10.0.0.0/8"},
							Icmp:        &felix.Rule_IcmpTypeCode{IcmpTypeCode: &felix.IcmpTypeAndCode{Type: 3, Code: 4}},
							NotProtocol: &felix.Protocol{NumberOrName: &felix.Protocol_Number{Number: 17}},
							NotSrcNet:   []string{"10.1.0.0/16"},
							NotIcmp:     &felix.Rule_NotIcmpType{NotIcmpType: 5},
							RuleId:      "rule-ping-1",
						}},
						OutboundRules: []*felix.Rule{{
							Action:      "deny",
							Protocol:    &felix.Protocol{NumberOrName: &felix.Protocol_Number{Number: 6}},
							DstPorts:    []*felix.PortRange{{First: 80, Last: 80}, {First: 8000, Last: 8080}},
							DstIpSetIds: []string{"s:dst-set"},
							NotDstPorts: []*felix.PortRange{{First: 8081, Last: 8081}},
							RuleId:      "rule-deny-web",
						}},
						Namespace: "prod",
						Tier:      "default",
					},
				}},
			},
		},
		{
			name: "ip set delta update",
			wire: cat(
				varint(toDPSeq, 103),
				sub(toDPIPSetDelta,
					str(1, "s:abc"),
					str(2, "10.0.0.1"), str(2, "10.0.0.2"),
					str(3, "10.0.0.3"),
				),
			),
			empty: &felix.ToDataplane{},
			want: &felix.ToDataplane{
				SequenceNumber: 103,
				Payload: &felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{
					Id:             "s:abc",
					AddedMembers:   []string{"10.0.0.1", "10.0.0.2"},
					RemovedMembers: []string{"10.0.0.3"},
				}},
			},
		},
		{
			name: "route update with types bitmap",
			wire: cat(
				varint(toDPSeq, 104), // 15 < 23: sequence number first
				sub(toDPRouteUpdate,
					varint(2, 2), // ip_pool_type VXLAN
					str(3, "10.65.1.0/26"),
					str(4, "node-b"),
					str(5, "192.168.0.2"),
					varint(8, 1),          // nat_outgoing
					sub(10, varint(2, 1)), // tunnel_type.vxlan
					varint(12, 1|16),      // types: REMOTE_WORKLOAD|REMOTE_TUNNEL
				),
			),
			empty: &felix.ToDataplane{},
			want: &felix.ToDataplane{
				SequenceNumber: 104,
				Payload: &felix.ToDataplane_RouteUpdate{RouteUpdate: &felix.RouteUpdate{
					IpPoolType:  felix.IPPoolType_VXLAN,
					Dst:         "10.65.1.0/26",
					DstNodeName: "node-b",
					DstNodeIp:   "192.168.0.2",
					NatOutgoing: true,
					TunnelType:  &felix.TunnelType{Vxlan: true},
					Types:       felix.RouteType_REMOTE_WORKLOAD | felix.RouteType_REMOTE_TUNNEL,
				}},
			},
		},
		{
			name: "service update with ports",
			wire: cat(
				varint(toDPSeq, 105),
				sub(toDPServiceUpdate,
					str(1, "web"),
					str(2, "prod"),
					str(3, "LoadBalancer"),
					str(4, "10.96.0.10"), str(4, "fd00:96::a"), // cluster_ips
					str(5, "203.0.113.10"), // loadbalancer_ip
					str(6, "198.51.100.7"), // external_ips
					sub(7, str(1, "TCP"), varint(2, 80), varint(3, 30080)),
					sub(7, str(1, "UDP"), varint(2, 53)),
					str(8, "203.0.113.11"), // loadbalancer_ingress_ips
				),
			),
			empty: &felix.ToDataplane{},
			want: &felix.ToDataplane{
				SequenceNumber: 105,
				Payload: &felix.ToDataplane_ServiceUpdate{ServiceUpdate: &felix.ServiceUpdate{
					Name:           "web",
					Namespace:      "prod",
					Type:           "LoadBalancer",
					ClusterIps:     []string{"10.96.0.10", "fd00:96::a"},
					LoadbalancerIp: "203.0.113.10",
					ExternalIps:    []string{"198.51.100.7"},
					Ports: []*felix.ServicePort{
						{Protocol: "TCP", Port: 80, NodePort: 30080},
						{Protocol: "UDP", Port: 53},
					},
					LoadbalancerIngressIps: []string{"203.0.113.11"},
				}},
			},
		},
		{
			name: "from dataplane: dataplane in sync",
			wire: cat(
				varint(fromDPSeq, 7),
				sub(fromDPDataplaneSyn),
			),
			empty: &felix.FromDataplane{},
			want: &felix.FromDataplane{
				SequenceNumber: 7,
				Payload:        &felix.FromDataplane_DataplaneInSync{DataplaneInSync: &felix.DataplaneInSync{}},
			},
		},
		{
			name: "from dataplane: workload endpoint status",
			wire: cat(
				varint(fromDPSeq, 8),
				sub(fromDPWEPStatus,
					sub(1, wepID()),
					sub(2, str(1, "up")),
				),
			),
			empty: &felix.FromDataplane{},
			want: &felix.FromDataplane{
				SequenceNumber: 8,
				Payload: &felix.FromDataplane_WorkloadEndpointStatusUpdate{WorkloadEndpointStatusUpdate: &felix.WorkloadEndpointStatusUpdate{
					Id:     wepIDMsg(),
					Status: &felix.EndpointStatus{Status: "up"},
				}},
			},
		},
	}
}

func TestGoldenWire(t *testing.T) {
	det := proto.MarshalOptions{Deterministic: true}
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.empty
			if err := proto.Unmarshal(tc.wire, got); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			if len(got.ProtoReflect().GetUnknown()) != 0 {
				t.Errorf("decode left unknown fields (a field number differs from upstream): %x", got.ProtoReflect().GetUnknown())
			}
			if !proto.Equal(got, tc.want) {
				t.Fatalf("decoded value differs:\n got %v\nwant %v", got, tc.want)
			}
			for what, m := range map[string]proto.Message{"decoded": got, "expected": tc.want} {
				b, err := det.Marshal(m)
				if err != nil {
					t.Fatalf("marshal %s: %v", what, err)
				}
				if !bytes.Equal(b, tc.wire) {
					t.Errorf("re-marshal of %s value differs:\n got %x\nwant %x", what, b, tc.wire)
				}
			}
		})
	}
}

// TestGoldenRetiredAndExtensionNumbers pins the numbers that are not plain
// payloads: upstream retired 35-38 (per-family host metadata), so they must
// decode as unknown, and dpd's own cases sit at 1000+.
func TestGoldenRetiredAndExtensionNumbers(t *testing.T) {
	var retired felix.ToDataplane
	if err := proto.Unmarshal(sub(37, str(1, "node-a")), &retired); err != nil {
		t.Fatalf("unmarshal retired field: %v", err)
	}
	if retired.Payload != nil || len(retired.ProtoReflect().GetUnknown()) == 0 {
		t.Errorf("field 37 must be unknown (reserved upstream), got payload %v", retired.Payload)
	}

	var ext felix.ToDataplane
	if err := proto.Unmarshal(sub(1000, str(1, "prod"), str(2, "web")), &ext); err != nil {
		t.Fatalf("unmarshal extension: %v", err)
	}
	sb := ext.GetServiceBackendsUpdate()
	if sb.GetNamespace() != "prod" || sb.GetName() != "web" {
		t.Errorf("field 1000 must be service_backends_update, got %v", &ext)
	}

	var happy felix.FromDataplane
	if err := proto.Unmarshal(sub(1000, varint(1, 1)), &happy); err != nil {
		t.Fatalf("unmarshal happy report: %v", err)
	}
	if !happy.GetHappyEndpoints().GetFull() {
		t.Errorf("FromDataplane field 1000 must be happy_endpoints, got %v", &happy)
	}
}
