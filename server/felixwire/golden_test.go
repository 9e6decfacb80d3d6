package felixwire

// Golden tests per generation: every input is encoded by hand with
// protowire from that generation's upstream field numbers (Calico
// v3.28-v3.31 for the older one, v3.32+/master for the current one; see
// docs/felix-generations.md), never by proto.Marshal of dpd's own types,
// and decoded into the current felix form.

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"github.com/dpd-dev/dpd/proto/felix"
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func str(num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
}

func varint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func sub(num protowire.Number, fields ...[]byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), cat(fields...))
}

// Field numbers, both generations unless noted.
const (
	seq          = 15
	inSync       = 1
	policyUpdate = 7
	policyRemove = 8
	hepUpdate    = 9
	hepRemove    = 10
	wepUpdate    = 11
	wepRemove    = 12
	hostMetaUp   = 14
	hostMetaRm   = 18
	routeUpdate  = 23
	hostMetaV6   = 35 // older only
	hostMetaV6Rm = 36 // older only
	hostMetaV46  = 37 // older only
	hostMetaV46R = 38 // older only
)

func wepID() []byte { return cat(str(2, "k8s"), str(3, "prod/pod-a"), str(4, "eth0")) }

func wepIDMsg() *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "prod/pod-a", EndpointId: "eth0"}
}

type golden struct {
	name string
	wire [][]byte // one session's messages, in order
	want []*felix.ToDataplane
	gen  []Generation
}

func run(t *testing.T, cases []golden) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := NewDecoder()
			for i, w := range c.wire {
				r, err := d.Decode(w)
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if diff := cmp.Diff(c.want[i], r.Msg, protocmp.Transform()); diff != "" {
					t.Fatalf("message %d (-want +got):\n%s", i, diff)
				}
				if r.Gen != c.gen[i] {
					t.Fatalf("message %d: recognised as %v, want %v", i, r.Gen, c.gen[i])
				}
				if len(r.Msg.ProtoReflect().GetUnknown()) != 0 {
					t.Fatalf("message %d: unknown fields left", i)
				}
			}
		})
	}
}

// The v3.28-v3.31 encodings.
func TestGoldenLegacy(t *testing.T) {
	run(t, []golden{
		{
			name: "workload endpoint tiers list v1 policy names",
			wire: [][]byte{cat(varint(seq, 7), sub(wepUpdate,
				sub(1, wepID()),
				sub(5,
					str(1, "active"), str(2, "cali1"), str(4, "kns.prod"), str(5, "10.65.0.2/32"),
					sub(7, // TierInfo: name 1, ingress 2, egress 3 (strings), default_action 4
						str(1, "default"),
						str(2, "prod/knp.default.allow-web"),
						str(2, "prod/staged:knp.default.try-web"),
						str(2, "prod/default.calico-np"),
						str(2, "prod/staged:default.calico-snp"),
						str(3, "default.allow-dns"),
						str(3, "staged:default.try-dns"),
						str(4, "Deny")),
					sub(7, str(1, "security"), str(2, "security.quarantine"), str(4, "Pass")),
				)))},
			want: []*felix.ToDataplane{{SequenceNumber: 7, Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
				Id: wepIDMsg(),
				Endpoint: &felix.WorkloadEndpoint{
					State: "active", Name: "cali1", ProfileIds: []string{"kns.prod"}, Ipv4Nets: []string{"10.65.0.2/32"},
					Tiers: []*felix.TierInfo{
						{Name: "default", DefaultAction: "Deny",
							IngressPolicies: []*felix.PolicyID{
								{Name: "allow-web", Namespace: "prod", Kind: KindKubernetesNetworkPolicy},
								{Name: "try-web", Namespace: "prod", Kind: KindStagedKubernetesNetworkPolicy},
								{Name: "default.calico-np", Namespace: "prod", Kind: KindNetworkPolicy},
								{Name: "default.calico-snp", Namespace: "prod", Kind: KindStagedNetworkPolicy},
							},
							EgressPolicies: []*felix.PolicyID{
								{Name: "default.allow-dns", Kind: KindGlobalNetworkPolicy},
								{Name: "default.try-dns", Kind: KindStagedGlobalNetworkPolicy},
							}},
						{Name: "security", DefaultAction: "Pass",
							IngressPolicies: []*felix.PolicyID{{Name: "security.quarantine", Kind: KindGlobalNetworkPolicy}}},
					},
				}}}}},
			gen: []Generation{Legacy},
		},
		{
			name: "policy id is tier and v1 name; the policy has no tier",
			wire: [][]byte{
				cat(varint(seq, 8), sub(policyUpdate,
					sub(1, str(1, "security"), str(2, "security.quarantine")), // PolicyID: tier 1, name 2
					sub(2, sub(1, str(1, "deny")), varint(3, 1), str(6, "all()")))),
				cat(varint(seq, 9), sub(policyUpdate,
					sub(1, str(1, "default"), str(2, "prod/staged:default.calico-snp")),
					sub(2, str(5, "prod")))),
				cat(varint(seq, 10), sub(policyRemove, sub(1, str(1, "security"), str(2, "security.quarantine")))),
			},
			want: []*felix.ToDataplane{
				{SequenceNumber: 8, Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
					Id:     &felix.PolicyID{Name: "security.quarantine", Kind: KindGlobalNetworkPolicy},
					Policy: &felix.Policy{InboundRules: []*felix.Rule{{Action: "deny"}}, Untracked: true, OriginalSelector: "all()", Tier: "security"},
				}}},
				{SequenceNumber: 9, Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
					Id:     &felix.PolicyID{Name: "default.calico-snp", Namespace: "prod", Kind: KindStagedNetworkPolicy},
					Policy: &felix.Policy{Namespace: "prod", Tier: "default"},
				}}},
				{SequenceNumber: 10, Payload: &felix.ToDataplane_ActivePolicyRemove{ActivePolicyRemove: &felix.ActivePolicyRemove{
					Id: &felix.PolicyID{Name: "security.quarantine", Kind: KindGlobalNetworkPolicy},
				}}},
			},
			gen: []Generation{Legacy, Legacy, Legacy},
		},
		{
			name: "host endpoint tier lists",
			wire: [][]byte{cat(varint(seq, 11), sub(hepUpdate,
				sub(1, str(2, "eth0")),
				sub(3, // HostEndpoint: tiers 3, untracked 6, pre_dnat 7, forward 8
					str(1, "eth0"),
					sub(3, str(1, "default"), str(2, "default.host-in")),
					sub(6, str(1, "default"), str(3, "default.untracked-out")),
					sub(7, str(1, "default"), str(2, "default.pre-dnat")),
					sub(8, str(1, "default"), str(2, "staged:default.fwd")),
					str(4, "192.0.2.1"))))},
			want: []*felix.ToDataplane{{SequenceNumber: 11, Payload: &felix.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: &felix.HostEndpointUpdate{
				Id: &felix.HostEndpointID{EndpointId: "eth0"},
				Endpoint: &felix.HostEndpoint{
					Name:              "eth0",
					Tiers:             []*felix.TierInfo{{Name: "default", IngressPolicies: []*felix.PolicyID{{Name: "default.host-in", Kind: KindGlobalNetworkPolicy}}}},
					UntrackedTiers:    []*felix.TierInfo{{Name: "default", EgressPolicies: []*felix.PolicyID{{Name: "default.untracked-out", Kind: KindGlobalNetworkPolicy}}}},
					PreDnatTiers:      []*felix.TierInfo{{Name: "default", IngressPolicies: []*felix.PolicyID{{Name: "default.pre-dnat", Kind: KindGlobalNetworkPolicy}}}},
					ForwardTiers:      []*felix.TierInfo{{Name: "default", IngressPolicies: []*felix.PolicyID{{Name: "default.fwd", Kind: KindStagedGlobalNetworkPolicy}}}},
					ExpectedIpv4Addrs: []string{"192.0.2.1"},
				}}}}},
			gen: []Generation{Legacy},
		},
		{
			name: "v3.28/v3.29 route: one consecutive type in field 1",
			wire: [][]byte{
				cat(varint(seq, 12), sub(routeUpdate, varint(1, 3), str(3, "10.65.0.2/32"), str(4, "node-a"), varint(9, 1))), // LOCAL_WORKLOAD=3
				cat(varint(seq, 13), sub(routeUpdate, varint(1, 5), str(3, "10.65.1.0/26"), str(5, "192.0.2.2"))),            // REMOTE_TUNNEL=5
			},
			want: []*felix.ToDataplane{
				{SequenceNumber: 12, Payload: &felix.ToDataplane_RouteUpdate{RouteUpdate: &felix.RouteUpdate{
					Types: felix.RouteType_LOCAL_WORKLOAD, Dst: "10.65.0.2/32", DstNodeName: "node-a", LocalWorkload: true}}},
				{SequenceNumber: 13, Payload: &felix.ToDataplane_RouteUpdate{RouteUpdate: &felix.RouteUpdate{
					Types: felix.RouteType_REMOTE_TUNNEL, Dst: "10.65.1.0/26", DstNodeIp: "192.0.2.2"}}},
			},
			gen: []Generation{Legacy, Legacy},
		},
		{
			name: "per-family host metadata folds into whole records",
			wire: [][]byte{
				cat(varint(seq, 20), sub(hostMetaV46, str(1, "node-b"), str(2, "192.0.2.2"), str(3, "2001:db8::2"), str(4, "64512"),
					sub(5, str(1, "zone"), str(2, "a")))),
				cat(varint(seq, 21), sub(hostMetaUp, str(1, "node-b"), str(2, "192.0.2.20"))), // IPv4 only
				cat(varint(seq, 22), sub(hostMetaV6, str(1, "node-b"), str(2, "2001:db8::20"))),
				cat(varint(seq, 23), sub(hostMetaV6Rm, str(1, "node-b"), str(2, "2001:db8::20"))),
				cat(varint(seq, 24), sub(hostMetaRm, str(1, "node-c"), str(2, "192.0.2.3"))),
				cat(varint(seq, 25), sub(hostMetaV46R, str(1, "node-b"), str(2, "192.0.2.20"))),
			},
			want: []*felix.ToDataplane{
				hostUpdate(20, &felix.HostMetadataUpdate{Hostname: "node-b", Ipv4Addr: "192.0.2.2", Ipv6Addr: "2001:db8::2", Asnumber: "64512", Labels: map[string]string{"zone": "a"}}),
				hostUpdate(21, &felix.HostMetadataUpdate{Hostname: "node-b", Ipv4Addr: "192.0.2.20", Ipv6Addr: "2001:db8::2", Asnumber: "64512", Labels: map[string]string{"zone": "a"}}),
				hostUpdate(22, &felix.HostMetadataUpdate{Hostname: "node-b", Ipv4Addr: "192.0.2.20", Ipv6Addr: "2001:db8::20", Asnumber: "64512", Labels: map[string]string{"zone": "a"}}),
				hostUpdate(23, &felix.HostMetadataUpdate{Hostname: "node-b", Ipv4Addr: "192.0.2.20", Asnumber: "64512", Labels: map[string]string{"zone": "a"}}),
				hostRemove(24, "node-c"),
				hostRemove(25, "node-b"),
			},
			gen: []Generation{Legacy, Legacy, Legacy, Legacy, Legacy, Legacy},
		},
		{
			name: "unchanged payloads pass through",
			wire: [][]byte{
				cat(varint(seq, 30), sub(inSync)),
				cat(varint(seq, 31), sub(wepRemove, sub(1, wepID()))),
				cat(varint(seq, 32), sub(wepUpdate, sub(1, wepID()), sub(5, str(2, "cali1"), sub(7, str(1, "default"))))), // a tier without policies
			},
			want: []*felix.ToDataplane{
				{SequenceNumber: 30, Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}},
				{SequenceNumber: 31, Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{Id: wepIDMsg()}}},
				{SequenceNumber: 32, Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
					Id: wepIDMsg(), Endpoint: &felix.WorkloadEndpoint{Name: "cali1", Tiers: []*felix.TierInfo{{Name: "default"}}}}}},
			},
			gen: []Generation{Current, Current, Current},
		},
	})
}

func hostUpdate(s uint64, u *felix.HostMetadataUpdate) *felix.ToDataplane {
	return &felix.ToDataplane{SequenceNumber: s, Payload: &felix.ToDataplane_HostMetadataUpdate{HostMetadataUpdate: u}}
}

func hostRemove(s uint64, name string) *felix.ToDataplane {
	return &felix.ToDataplane{SequenceNumber: s, Payload: &felix.ToDataplane_HostMetadataRemove{HostMetadataRemove: &felix.HostMetadataRemove{Hostname: name}}}
}

// The v3.32+/master encodings.
func TestGoldenCurrent(t *testing.T) {
	run(t, []golden{
		{
			name: "workload endpoint tiers list PolicyIDs",
			wire: [][]byte{cat(varint(seq, 1), sub(wepUpdate,
				sub(1, wepID()),
				sub(5, str(2, "cali1"),
					sub(7, str(1, "default"),
						sub(2, str(2, "allow-web"), str(3, "prod"), str(4, "KubernetesNetworkPolicy")), // PolicyID: name 2, namespace 3, kind 4
						sub(3, str(2, "try-dns"), str(4, "StagedGlobalNetworkPolicy")),
						str(4, "Pass")))))},
			want: []*felix.ToDataplane{{SequenceNumber: 1, Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
				Id: wepIDMsg(),
				Endpoint: &felix.WorkloadEndpoint{Name: "cali1", Tiers: []*felix.TierInfo{{
					Name: "default", DefaultAction: "Pass",
					IngressPolicies: []*felix.PolicyID{{Name: "allow-web", Namespace: "prod", Kind: KindKubernetesNetworkPolicy}},
					EgressPolicies:  []*felix.PolicyID{{Name: "try-dns", Kind: KindStagedGlobalNetworkPolicy}},
				}}}}}}},
			gen: []Generation{Current},
		},
		{
			name: "policy id without tier; the policy has it",
			wire: [][]byte{cat(varint(seq, 2), sub(policyUpdate,
				sub(1, str(2, "quarantine"), str(4, "GlobalNetworkPolicy")),
				sub(2, sub(1, str(1, "deny")), str(8, "security"))))},
			want: []*felix.ToDataplane{{SequenceNumber: 2, Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
				Id:     &felix.PolicyID{Name: "quarantine", Kind: KindGlobalNetworkPolicy},
				Policy: &felix.Policy{InboundRules: []*felix.Rule{{Action: "deny"}}, Tier: "security"},
			}}}},
			gen: []Generation{Current},
		},
		{
			name: "route types bitmap; host metadata whole records",
			wire: [][]byte{
				cat(varint(seq, 3), sub(routeUpdate, varint(12, 4|8), str(3, "10.65.0.2/32"))),
				cat(varint(seq, 4), sub(hostMetaUp, str(1, "node-b"), str(2, "192.0.2.2"), str(3, "2001:db8::2"))),
				cat(varint(seq, 5), sub(hostMetaUp, str(1, "node-b"), str(2, "192.0.2.20"))), // replaces: no IPv6 any more
			},
			want: []*felix.ToDataplane{
				{SequenceNumber: 3, Payload: &felix.ToDataplane_RouteUpdate{RouteUpdate: &felix.RouteUpdate{Types: felix.RouteType(4 | 8), Dst: "10.65.0.2/32"}}},
				hostUpdate(4, &felix.HostMetadataUpdate{Hostname: "node-b", Ipv4Addr: "192.0.2.2", Ipv6Addr: "2001:db8::2"}),
				hostUpdate(5, &felix.HostMetadataUpdate{Hostname: "node-b", Ipv4Addr: "192.0.2.20"}),
			},
			gen: []Generation{Current, Current, Current},
		},
	})
}

// The older encodings decode without error, but wrongly, under the
// current message set: detection cannot rest on decode failures.
func TestLegacyMisreadByCurrentSet(t *testing.T) {
	oldID := cat(varint(seq, 1), sub(policyUpdate, sub(1, str(1, "security"), str(2, "security.quarantine")), sub(2)))
	var m felix.ToDataplane
	if err := proto.Unmarshal(oldID, &m); err != nil {
		t.Fatalf("an older PolicyID no longer decodes under the current set (%v): this test's premise changed", err)
	}
	if got := m.GetActivePolicyUpdate().GetId().GetKind(); got != "" {
		t.Fatalf("kind %q", got)
	}
	// A 9-byte v1 name starting with 'a' is tag 12/fixed64 and 8 bytes:
	// valid protobuf, an empty PolicyID to the current set.
	oldTier := cat(varint(seq, 2), sub(wepUpdate, sub(1, wepID()), sub(5, str(2, "cali1"), sub(7, str(1, "a"), str(2, "a.bcdefgh")))))
	if err := proto.Unmarshal(oldTier, &m); err != nil {
		t.Fatalf("premise: %v", err)
	}
	if got := m.GetWorkloadEndpointUpdate().GetEndpoint().GetTiers()[0].GetIngressPolicies()[0].GetName(); got != "" {
		t.Fatalf("name %q", got)
	}
	// felixwire reads both right.
	d := NewDecoder()
	r, err := d.Decode(oldID)
	if err != nil || r.Msg.GetActivePolicyUpdate().GetId().GetName() != "security.quarantine" || r.Msg.GetActivePolicyUpdate().GetPolicy().GetTier() != "security" {
		t.Fatalf("policy: %v %v", r.Msg, err)
	}
	r, err = d.Decode(oldTier)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Msg.GetWorkloadEndpointUpdate().GetEndpoint().GetTiers()[0].GetIngressPolicies()[0]; got.GetName() != "a.bcdefgh" || got.GetKind() != KindGlobalNetworkPolicy {
		t.Fatalf("tier policy %v", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	badTier := cat(varint(seq, 40), sub(wepUpdate, sub(1, wepID()),
		sub(5, str(2, "cali1"), sub(7, str(1, "default"), str(2, "default.a"), sub(2, str(2, "b"), str(4, "GlobalNetworkPolicy"))))))
	cut := cat(varint(seq, 41), sub(wepUpdate, sub(1, wepID()), sub(5, str(2, "cali1"), sub(7, []byte{0x12, 0x7f}))))
	// A host endpoint whose tiers mix names and PolicyIDs, and a removal
	// cut inside its body after the id.
	badHostTier := cat(varint(seq, 45), sub(hepUpdate, sub(1, str(2, "eth0-hep")),
		sub(3, str(1, "eth0"), sub(7, str(1, "default"), str(2, "default.a"), sub(2, str(2, "b"))))))
	cutHost := cat(varint(seq, 46), sub(hepRemove, sub(1, str(2, "eth0-hep")), []byte{0x12, 0x7f}))
	tests := []struct {
		name     string
		wire     []byte
		endpoint bool
		host     string // the host endpoint blamed
	}{
		{"host endpoint tier mixes names and PolicyIDs", badHostTier, false, "eth0-hep"},
		{"host endpoint removal cut short", cutHost, false, "eth0-hep"},
		{"host endpoint without an id", cat(varint(seq, 47), sub(hepUpdate, sub(3, []byte{0x12, 0x7f}))), false, ""},
		{"tier mixes names and PolicyIDs", badTier, true, ""},
		{"tier cut short", cut, true, ""},
		{"envelope cut short", []byte{0x7a, 0x05, 0x01}, false, ""},
		{"policy id cut short", cat(varint(seq, 42), sub(policyUpdate, sub(1, []byte{0x0a, 0x09, 'x'}))), false, ""},
		{"older route with an unknown type", cat(varint(seq, 43), sub(routeUpdate, varint(1, 9), str(3, "10.0.0.0/8"))), false, ""},
		{"older policy id without tier", cat(varint(seq, 44), sub(policyRemove, sub(1, str(1, ""), str(2, "x")))), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewDecoder().Decode(tt.wire)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Decode = %v, want an *Error", err)
			}
			if tt.endpoint != (e.Endpoint != nil) || e.HostEndpoint != tt.host || e.Resync() == (tt.endpoint || tt.host != "") {
				t.Fatalf("endpoint %v, host endpoint %q, resync %v; want endpoint %v, host endpoint %q (%v)",
					e.Endpoint, e.HostEndpoint, e.Resync(), tt.endpoint, tt.host, err)
			}
			if tt.endpoint && !proto.Equal(e.Endpoint, wepIDMsg()) {
				t.Fatalf("endpoint %v", e.Endpoint)
			}
			if e.N != 1 {
				t.Fatalf("message number %d", e.N)
			}
		})
	}
}

// Unknown payloads and unknown fields are not errors.
func TestUnknownIsNotAnError(t *testing.T) {
	d := NewDecoder()
	r, err := d.Decode(cat(varint(seq, 1), sub(39, str(1, "future"))))
	if err != nil || r.Unknown != 39 || r.Msg.Payload != nil {
		t.Fatalf("unknown payload: %+v %v", r, err)
	}
	r, err = d.Decode(cat(varint(seq, 2), sub(wepRemove, sub(1, wepID(), str(99, "new")), varint(50, 1))))
	if err != nil || r.Unknown != 0 || r.Msg.GetWorkloadEndpointRemove().GetId().GetWorkloadId() != "prod/pod-a" {
		t.Fatalf("unknown fields: %+v %v", r, err)
	}
}

// A v3.32.0 Felix sends current policy ids but older host metadata: each
// message is read for what it is.
func TestMixedSenderPerMessage(t *testing.T) {
	d := NewDecoder()
	for i, w := range [][]byte{
		cat(varint(seq, 1), sub(policyRemove, sub(1, str(2, "p"), str(4, "GlobalNetworkPolicy")))),
		cat(varint(seq, 2), sub(hostMetaV46, str(1, "n"), str(2, "192.0.2.1"), str(3, "2001:db8::1"))),
		cat(varint(seq, 3), sub(policyRemove, sub(1, str(1, "default"), str(2, "default.q")))),
		cat(varint(seq, 4), sub(hostMetaUp, str(1, "n"), str(2, "192.0.2.9"))),
	} {
		r, err := d.Decode(w)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		want := []Generation{Current, Legacy, Legacy, Legacy}[i]
		if r.Gen != want {
			t.Fatalf("%d: %v, want %v", i, r.Gen, want)
		}
		if i == 3 && r.Msg.GetHostMetadataUpdate().GetIpv6Addr() != "2001:db8::1" {
			t.Fatalf("the IPv4-only update lost the IPv6 address: %v", r.Msg)
		}
	}
	if c, l := d.Seen(); c != 1 || l != 3 {
		t.Fatalf("seen %d current, %d legacy", c, l)
	}
}
