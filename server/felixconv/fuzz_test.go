package felixconv

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// checkUpdate asserts what the engine and kernels rely on in an update
// Translate produced for msg.
func checkUpdate(msg *felix.ToDataplane, u model.Update) error {
	if u == nil {
		return errors.New("nil update without an error")
	}
	if u.Sequence() != msg.GetSequenceNumber() {
		return fmt.Errorf("sequence %d, message has %d", u.Sequence(), msg.GetSequenceNumber())
	}
	if k := PayloadKind(msg); u.Kind() != k {
		return fmt.Errorf("kind %q, payload is %q", u.Kind(), k)
	}
	switch u := u.(type) {
	case *model.WorkloadEndpointUpdate:
		if err := ifaceName("iface", u.Endpoint.Iface); err != nil {
			return err
		}
		return checkPrefixes(append(u.Endpoint.IPv4Nets, u.Endpoint.IPv6Nets...))
	case *model.IPSetUpdate:
		for _, m := range u.Members {
			if err := u.Type.Check(m); err != nil {
				return fmt.Errorf("member %+v: %w", m, err)
			}
		}
		return checkMembers(u.Members)
	case *model.IPSetDeltaUpdate:
		return checkMembers(append(u.Added, u.Removed...))
	case *model.ActivePolicyUpdate:
		return checkRules(append(u.Policy.Inbound, u.Policy.Outbound...))
	case *model.ActiveProfileUpdate:
		return checkRules(append(u.Profile.Inbound, u.Profile.Outbound...))
	case *model.RouteUpdate:
		return checkPrefixes([]netip.Prefix{u.Route.Dst})
	case *model.RouteRemove:
		return checkPrefixes([]netip.Prefix{u.Dst})
	case *model.ServiceBackendsUpdate:
		if u.Key.Namespace == "" || u.Key.Name == "" {
			return fmt.Errorf("backends key %+v", u.Key)
		}
	}
	return nil
}

// checkMembers asserts members are valid, masked prefixes: the kernel keys
// its tries by them.
func checkMembers(ms []model.IPSetMember) error {
	for _, m := range ms {
		if err := checkPrefixes([]netip.Prefix{m.Prefix}); err != nil {
			return err
		}
	}
	return nil
}

func checkPrefixes(ps []netip.Prefix) error {
	for _, p := range ps {
		if !p.IsValid() || p != p.Masked() {
			return fmt.Errorf("prefix %v not valid and masked", p)
		}
	}
	return nil
}

// checkRules asserts what kernels rely on in every parsed rule.
func checkRules(rs []model.Rule) error {
	for i, r := range rs {
		if r.ID == "" {
			return fmt.Errorf("rule %d has no ID", i)
		}
		for _, prs := range [][]model.PortRange{r.SrcPorts, r.NotSrcPorts, r.DstPorts, r.NotDstPorts} {
			for _, pr := range prs {
				if pr.First > pr.Last {
					return fmt.Errorf("rule %d: port range %v", i, pr)
				}
			}
		}
	}
	return nil
}

func seedMessages() []*felix.ToDataplane {
	return []*felix.ToDataplane{
		{SequenceNumber: 1, Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}},
		{SequenceNumber: 2, Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: validWEP()}},
		{SequenceNumber: 3, Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
			Id: &felix.PolicyID{Name: "p", Kind: "NetworkPolicy", Namespace: "ns"},
			Policy: &felix.Policy{InboundRules: []*felix.Rule{{
				Action: "allow", Protocol: pname("tcp"), SrcNet: []string{"10.0.0.0/8"},
				DstPorts: []*felix.PortRange{{First: 80, Last: 90}}, NotSrcNet: []string{"10.1.0.0/16"},
				Icmp:    &felix.Rule_IcmpTypeCode{IcmpTypeCode: &felix.IcmpTypeAndCode{Type: 8}},
				NotIcmp: &felix.Rule_NotIcmpType{NotIcmpType: 3}, NotProtocol: pnum(17), RuleId: "r",
			}}},
		}}},
		{SequenceNumber: 4, Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: "s", Type: felix.IPSetUpdate_IP_AND_PORT,
			Members: []string{"10.0.0.1,tcp:80", "fd00::1,udp:53"}}}},
		{SequenceNumber: 5, Payload: &felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{Id: "s",
			AddedMembers: []string{"10.0.0.0/8"}, RemovedMembers: []string{"10.0.0.1"}}}},
		{SequenceNumber: 6, Payload: &felix.ToDataplane_RouteUpdate{RouteUpdate: &felix.RouteUpdate{Dst: "10.65.1.0/26", DstNodeIp: "192.168.0.2",
			Types: 17, IpPoolType: felix.IPPoolType_VXLAN, TunnelType: &felix.TunnelType{Vxlan: true}}}},
		{SequenceNumber: 7, Payload: &felix.ToDataplane_ServiceUpdate{ServiceUpdate: &felix.ServiceUpdate{Name: "s", Namespace: "n",
			ClusterIps: []string{"10.96.0.1"}, Ports: []*felix.ServicePort{{Protocol: "TCP", Port: 443, NodePort: 30443}}}}},
		{SequenceNumber: 8, Payload: &felix.ToDataplane_ServiceBackendsUpdate{ServiceBackendsUpdate: &felix.ServiceBackendsUpdate{Name: "s", Namespace: "n",
			Backends: []*felix.ServiceBackend{{Ip: "10.65.0.2", Port: 6443, Protocol: "TCP", Ready: true}}}}},
		{SequenceNumber: 9, Payload: &felix.ToDataplane_HostEndpointUpdate{HostEndpointUpdate: &felix.HostEndpointUpdate{
			Id: &felix.HostEndpointID{EndpointId: "eth0"}, Endpoint: &felix.HostEndpoint{Name: "eth0", ExpectedIpv4Addrs: []string{"192.168.0.1"}}}}},
		{SequenceNumber: 10, Payload: &felix.ToDataplane_VtepUpdate{VtepUpdate: &felix.VXLANTunnelEndpointUpdate{Node: "n", Mac: "66:00:00:00:00:01", Ipv4Addr: "10.65.1.0"}}},
	}
}

// FuzzTranslate: any bytes that decode either translate into an update
// that keeps the model's invariants, or fail with an *Error that names the
// message. Translating twice gives the same update.
func FuzzTranslate(f *testing.F) {
	for _, m := range seedMessages() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg felix.ToDataplane
		if err := proto.Unmarshal(data, &msg); err != nil {
			return
		}
		u, err := Translate(&msg)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Translate returned %T", err)
			}
			if e.Seq != msg.SequenceNumber || e.Kind != PayloadKind(&msg) || e.Reason == "" {
				t.Fatalf("error %+v does not name message %d (%s)", e, msg.SequenceNumber, PayloadKind(&msg))
			}
			return
		}
		if err := checkUpdate(&msg, u); err != nil {
			t.Fatalf("Translate(%v): %v", &msg, err)
		}
		again, _ := Translate(&msg)
		if !reflect.DeepEqual(u, again) {
			t.Fatalf("Translate(%v) is not deterministic:\n%+v\n%+v", &msg, u, again)
		}
	})
}

var memberProtoNames = map[uint8]string{model.ProtoTCP: "tcp", model.ProtoUDP: "udp", model.ProtoSCTP: "sctp"}

func FuzzIPSetMember(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.0/8", "fd00::1", "fd00::/64", "10.0.0.1,tcp:80",
		"[fd00::1],udp:53", "fd00::1,sctp:0", "10.0.0.1/32", "", ",", "1.2.3.4,tcp:", "::ffff:1.2.3.4"} {
		for typ := uint8(0); typ < 4; typ++ {
			f.Add(s, typ)
		}
	}
	f.Fuzz(func(t *testing.T, s string, typ uint8) {
		ft := felix.IPSetUpdate_IPSetType(typ % 4) // 3 is not a known type
		ms, err := IPSetMembers(ft, []string{s})
		anyM, anyT, anyErr := IPSetMemberAny(s)
		if err != nil {
			return
		}
		if len(ms) != 1 {
			t.Fatalf("%q: %d members", s, len(ms))
		}
		m := ms[0]
		if !m.Prefix.IsValid() || m.Prefix != m.Prefix.Masked() {
			t.Fatalf("%q: prefix %v not valid and masked", s, m.Prefix)
		}
		if anyErr != nil {
			t.Fatalf("%q accepted for type %v but not by IPSetMemberAny: %v", s, ft, anyErr)
		}
		var canon string
		switch ft {
		case felix.IPSetUpdate_IP:
			if !m.Prefix.IsSingleIP() || m.Proto != 0 || m.Port != 0 || anyM != m {
				t.Fatalf("%q: IP member %+v (any: %+v type %d)", s, m, anyM, anyT)
			}
			canon = m.Prefix.Addr().String()
		case felix.IPSetUpdate_NET:
			if m.Proto != 0 || m.Port != 0 || anyM != m {
				t.Fatalf("%q: NET member %+v (any: %+v)", s, m, anyM)
			}
			canon = m.Prefix.String()
		case felix.IPSetUpdate_IP_AND_PORT:
			name, ok := memberProtoNames[m.Proto]
			if !ok || !m.Prefix.IsSingleIP() || anyM != m || anyT != model.IPSetIPAndPort {
				t.Fatalf("%q: IP_AND_PORT member %+v (any: %+v)", s, m, anyM)
			}
			canon = fmt.Sprintf("%s,%s:%d", m.Prefix.Addr(), name, m.Port)
		default:
			t.Fatalf("%q accepted for unknown type %d", s, ft)
		}
		again, err := IPSetMembers(ft, []string{canon})
		if err != nil || again[0] != m {
			t.Fatalf("%q: canonical form %q re-parses to %v, %v; want %+v", s, canon, again, err, m)
		}
	})
}
