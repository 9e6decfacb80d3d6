package polprog

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// protoByName is how the engine derives protocol numbers from Calico names.
var protoByName = map[string]uint8{"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58, "sctp": 132, "udplite": 136}

func proto(name string) *uint8 {
	p, ok := protoByName[name]
	if !ok {
		panic("unknown protocol " + name)
	}
	return &p
}

func nets(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, x := range s {
		out[i] = netip.MustParsePrefix(x)
	}
	return out
}

func ports(r ...uint16) []model.PortRange {
	var out []model.PortRange
	for i := 0; i+1 < len(r); i += 2 {
		out = append(out, model.PortRange{First: r[i], Last: r[i+1]})
	}
	return out
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func tcp(src, dst string, sport, dport uint16) pkt {
	return pkt{src: addr(src), dst: addr(dst), sport: sport, dport: dport, proto: 6}
}

func udp(src, dst string, sport, dport uint16) pkt {
	p := tcp(src, dst, sport, dport)
	p.proto = 17
	return p
}

func icmp(src, dst string, typ, code uint8) pkt {
	p := pkt{src: addr(src), dst: addr(dst), proto: 1, icmpType: typ, icmpCode: code, sport: 77}
	if p.src.Is6() {
		p.proto = 58
	}
	return p
}

// allowIf is one tier "t" (default deny) whose policy "p" allows what r matches.
func allowIf(r model.Rule) *model.DirectionPolicy {
	if r.Action == 0 {
		r.Action = model.ActionAllow
	}
	return &model.DirectionPolicy{Tiers: []model.Tier{{Name: "t", DefaultAction: model.ActionDeny,
		Policies: []model.PolicyRules{{Name: "p", Kind: "policy", Rules: []model.Rule{r}}}}}}
}

// Test sets: ids are arbitrary but fixed.
var testSets = resolver{"a": 11, "b": 12, "np": 13, "svc": 14, "np6": 15, "srcnp": 16}

func fillTestSets(h *harness) {
	h.addMember(11, netip.MustParsePrefix("10.0.0.0/24"), 0, 0)
	h.addMember(12, netip.MustParsePrefix("10.0.0.5/32"), 0, 0)
	h.addMember(12, netip.MustParsePrefix("fd00::5/128"), 0, 0)
	h.addMember(13, netip.MustParsePrefix("10.0.0.2/32"), 6, 8443)
	h.addMember(14, netip.MustParsePrefix("10.96.0.10/32"), 17, 53)
	h.addMember(15, netip.MustParsePrefix("fd00::2/128"), 6, 8443)
	h.addMember(16, netip.MustParsePrefix("10.0.0.9/32"), 6, 1234)
}

const (
	allowed = "p#0"
	denied  = "default:t"
)

type matchCase struct {
	name string
	rule model.Rule
	pkts []pkt
	want []string // describe() of the deciding rule per packet; allowed or denied
}

func matchCases() []matchCase {
	return []matchCase{
		{"ipversion 4", model.Rule{IPVersion: 4},
			[]pkt{tcp("10.0.0.1", "10.0.0.2", 1, 80), tcp("fd00::1", "fd00::2", 1, 80)}, []string{allowed, denied}},
		{"ipversion 6", model.Rule{IPVersion: 6},
			[]pkt{tcp("10.0.0.1", "10.0.0.2", 1, 80), tcp("fd00::1", "fd00::2", 1, 80)}, []string{denied, allowed}},
		{"protocol tcp", model.Rule{Protocol: proto("tcp")},
			[]pkt{tcp("10.0.0.1", "10.0.0.2", 1, 80), udp("10.0.0.1", "10.0.0.2", 1, 80), icmp("10.0.0.1", "10.0.0.2", 8, 0)},
			[]string{allowed, denied, denied}},
		{"protocol sctp", model.Rule{Protocol: proto("sctp")},
			[]pkt{{src: addr("10.0.0.1"), dst: addr("10.0.0.2"), proto: 132}, tcp("10.0.0.1", "10.0.0.2", 1, 80)},
			[]string{allowed, denied}},
		{"not protocol udp", model.Rule{NotProtocol: proto("udp")},
			[]pkt{tcp("10.0.0.1", "10.0.0.2", 1, 80), udp("10.0.0.1", "10.0.0.2", 1, 80)}, []string{allowed, denied}},
		{"src nets", model.Rule{SrcNets: nets("10.0.0.0/8", "192.168.1.5/32")},
			[]pkt{tcp("10.1.2.3", "1.1.1.1", 1, 80), tcp("192.168.1.5", "1.1.1.1", 1, 80), tcp("192.168.1.6", "1.1.1.1", 1, 80),
				tcp("fd00::1", "fd00::2", 1, 80)},
			[]string{allowed, allowed, denied, denied}},
		{"dst nets", model.Rule{DstNets: nets("172.16.0.0/12")},
			[]pkt{tcp("1.1.1.1", "172.31.255.255", 1, 80), tcp("1.1.1.1", "172.32.0.0", 1, 80)}, []string{allowed, denied}},
		{"not src nets", model.Rule{NotSrcNets: nets("10.0.0.0/8", "192.168.0.0/16")},
			[]pkt{tcp("11.0.0.1", "1.1.1.1", 1, 80), tcp("10.9.9.9", "1.1.1.1", 1, 80), tcp("192.168.3.3", "1.1.1.1", 1, 80)},
			[]string{allowed, denied, denied}},
		{"not dst nets", model.Rule{NotDstNets: nets("10.0.0.0/8")},
			[]pkt{tcp("1.1.1.1", "10.0.0.1", 1, 80), tcp("1.1.1.1", "11.0.0.1", 1, 80)}, []string{denied, allowed}},
		{"v6 nets", model.Rule{SrcNets: nets("fd00:1::/32", "10.0.0.0/8", "fd00::1/128")},
			[]pkt{tcp("fd00:1:2::3", "fd00::2", 1, 80), tcp("fd00::1", "fd00::2", 1, 80), tcp("fd00:2::1", "fd00::2", 1, 80),
				tcp("10.0.0.1", "10.0.0.2", 1, 80), tcp("fd00::2", "fd00::2", 1, 80)},
			[]string{allowed, allowed, denied, allowed, denied}},
		{"v6 net odd length", model.Rule{DstNets: nets("2001:db8:abcd:12::/63")},
			[]pkt{tcp("fd00::1", "2001:db8:abcd:13::1", 1, 80), tcp("fd00::1", "2001:db8:abcd:14::1", 1, 80)},
			[]string{allowed, denied}},
		{"any net", model.Rule{DstNets: nets("0.0.0.0/0")},
			[]pkt{tcp("1.1.1.1", "9.9.9.9", 1, 80), tcp("fd00::1", "fd00::2", 1, 80)}, []string{allowed, denied}},
		{"dst ports and range", model.Rule{Protocol: proto("tcp"), DstPorts: ports(80, 80, 8000, 8080)},
			[]pkt{tcp("1.1.1.1", "2.2.2.2", 1, 80), tcp("1.1.1.1", "2.2.2.2", 1, 8050), tcp("1.1.1.1", "2.2.2.2", 1, 8080),
				tcp("1.1.1.1", "2.2.2.2", 1, 81), tcp("1.1.1.1", "2.2.2.2", 1, 7999), tcp("1.1.1.1", "2.2.2.2", 1, 8081),
				tcp("1.1.1.1", "2.2.2.2", 80, 1)},
			[]string{allowed, allowed, allowed, denied, denied, denied, denied}},
		{"src port range from 0", model.Rule{SrcPorts: ports(0, 1023)},
			[]pkt{tcp("1.1.1.1", "2.2.2.2", 0, 1), udp("1.1.1.1", "2.2.2.2", 1023, 1), tcp("1.1.1.1", "2.2.2.2", 1024, 1)},
			[]string{allowed, allowed, denied}},
		{"ports need a port protocol", model.Rule{DstPorts: ports(0, 65535)},
			[]pkt{udp("1.1.1.1", "2.2.2.2", 1, 9), icmp("1.1.1.1", "2.2.2.2", 8, 0), {src: addr("1.1.1.1"), dst: addr("2.2.2.2"), proto: 136, dport: 5}},
			[]string{allowed, denied, allowed}},
		{"ports with a portless protocol", model.Rule{Protocol: proto("icmp"), DstPorts: ports(0, 65535)},
			[]pkt{icmp("1.1.1.1", "2.2.2.2", 8, 0), tcp("1.1.1.1", "2.2.2.2", 1, 1)}, []string{denied, denied}},
		{"not dst ports", model.Rule{Protocol: proto("tcp"), NotDstPorts: ports(22, 22, 6000, 6100)},
			[]pkt{tcp("1.1.1.1", "2.2.2.2", 1, 23), tcp("1.1.1.1", "2.2.2.2", 1, 22), tcp("1.1.1.1", "2.2.2.2", 1, 6050)},
			[]string{allowed, denied, denied}},
		{"not src ports", model.Rule{NotSrcPorts: ports(53, 53)},
			[]pkt{udp("1.1.1.1", "2.2.2.2", 53, 1), udp("1.1.1.1", "2.2.2.2", 54, 1), icmp("1.1.1.1", "2.2.2.2", 8, 0)},
			[]string{denied, allowed, denied}},
		{"named dst port", model.Rule{DstNamedPortSets: []string{"np"}},
			[]pkt{tcp("1.1.1.1", "10.0.0.2", 1, 8443), tcp("1.1.1.1", "10.0.0.2", 1, 8444), udp("1.1.1.1", "10.0.0.2", 1, 8443),
				tcp("1.1.1.1", "10.0.0.3", 1, 8443)},
			[]string{allowed, denied, denied, denied}},
		{"named port ORed with ports", model.Rule{Protocol: proto("tcp"), DstPorts: ports(80, 80), DstNamedPortSets: []string{"np", "np6"}},
			[]pkt{tcp("1.1.1.1", "10.0.0.2", 1, 8443), tcp("1.1.1.1", "10.0.0.7", 1, 80), tcp("1.1.1.1", "10.0.0.7", 1, 8443),
				tcp("fd00::1", "fd00::2", 1, 8443), tcp("fd00::1", "fd00::3", 1, 8443)},
			[]string{allowed, allowed, denied, allowed, denied}},
		{"named src port", model.Rule{SrcNamedPortSets: []string{"srcnp"}},
			[]pkt{tcp("10.0.0.9", "1.1.1.1", 1234, 1), tcp("10.0.0.9", "1.1.1.1", 1235, 1), tcp("1.1.1.1", "10.0.0.9", 1, 1234)},
			[]string{allowed, denied, denied}},
		{"not named dst port", model.Rule{Protocol: proto("tcp"), NotDstPorts: ports(80, 80), NotDstNamedPortSets: []string{"np"}},
			[]pkt{tcp("1.1.1.1", "10.0.0.2", 1, 8443), tcp("1.1.1.1", "10.0.0.2", 1, 80), tcp("1.1.1.1", "10.0.0.2", 1, 81)},
			[]string{denied, denied, allowed}},
		{"not named src port", model.Rule{NotSrcNamedPortSets: []string{"srcnp"}},
			[]pkt{tcp("10.0.0.9", "1.1.1.1", 1234, 1), tcp("10.0.0.9", "1.1.1.1", 1235, 1)}, []string{denied, allowed}},
		{"src ip sets ANDed", model.Rule{SrcIPSets: []string{"a", "b"}},
			[]pkt{tcp("10.0.0.5", "1.1.1.1", 1, 1), tcp("10.0.0.6", "1.1.1.1", 1, 1), tcp("10.0.1.5", "1.1.1.1", 1, 1),
				tcp("fd00::5", "fd00::1", 1, 1)},
			[]string{allowed, denied, denied, denied}},
		{"dst ip set v6", model.Rule{DstIPSets: []string{"b"}},
			[]pkt{tcp("fd00::1", "fd00::5", 1, 1), tcp("fd00::1", "fd00::6", 1, 1), tcp("1.1.1.1", "10.0.0.5", 1, 1)},
			[]string{allowed, denied, allowed}},
		{"not src ip sets", model.Rule{NotSrcIPSets: []string{"a", "b"}},
			[]pkt{tcp("10.1.0.1", "1.1.1.1", 1, 1), tcp("10.0.0.1", "1.1.1.1", 1, 1), tcp("fd00::5", "1.1.1.1", 1, 1)},
			[]string{allowed, denied, denied}},
		{"not dst ip sets", model.Rule{NotDstIPSets: []string{"a"}},
			[]pkt{tcp("1.1.1.1", "10.0.0.7", 1, 1), tcp("1.1.1.1", "10.0.1.7", 1, 1)}, []string{denied, allowed}},
		{"dst ip port sets", model.Rule{DstIPPortSets: []string{"svc"}},
			[]pkt{udp("1.1.1.1", "10.96.0.10", 1, 53), tcp("1.1.1.1", "10.96.0.10", 1, 53), udp("1.1.1.1", "10.96.0.10", 1, 54)},
			[]string{allowed, denied, denied}},
		{"icmp type", model.Rule{Protocol: proto("icmp"), ICMP: &model.ICMPMatch{Type: 8}},
			[]pkt{icmp("1.1.1.1", "2.2.2.2", 8, 0), icmp("1.1.1.1", "2.2.2.2", 8, 5), icmp("1.1.1.1", "2.2.2.2", 0, 0)},
			[]string{allowed, allowed, denied}},
		{"icmp type without protocol", model.Rule{ICMP: &model.ICMPMatch{Type: 0}},
			[]pkt{icmp("1.1.1.1", "2.2.2.2", 0, 0), tcp("1.1.1.1", "2.2.2.2", 1, 1)}, []string{allowed, denied}},
		{"icmp type and code", model.Rule{ICMP: &model.ICMPMatch{Type: 3, Code: 4, HasCode: true}},
			[]pkt{icmp("1.1.1.1", "2.2.2.2", 3, 4), icmp("1.1.1.1", "2.2.2.2", 3, 1), icmp("1.1.1.1", "2.2.2.2", 4, 4)},
			[]string{allowed, denied, denied}},
		{"icmpv6 type", model.Rule{Protocol: proto("icmpv6"), ICMP: &model.ICMPMatch{Type: 128}},
			[]pkt{icmp("fd00::1", "fd00::2", 128, 0), icmp("fd00::1", "fd00::2", 129, 0)}, []string{allowed, denied}},
		{"not icmp type", model.Rule{NotICMP: &model.ICMPMatch{Type: 8}},
			[]pkt{icmp("1.1.1.1", "2.2.2.2", 8, 0), icmp("1.1.1.1", "2.2.2.2", 0, 0), tcp("1.1.1.1", "2.2.2.2", 1, 8)},
			[]string{denied, allowed, allowed}},
		{"not icmp type and code", model.Rule{NotICMP: &model.ICMPMatch{Type: 3, Code: 4, HasCode: true}},
			[]pkt{icmp("1.1.1.1", "2.2.2.2", 3, 4), icmp("1.1.1.1", "2.2.2.2", 3, 3), udp("1.1.1.1", "2.2.2.2", 3, 4)},
			[]string{denied, allowed, allowed}},
		{"all ANDed", model.Rule{IPVersion: 4, Protocol: proto("tcp"), SrcNets: nets("10.0.0.0/8"), DstPorts: ports(443, 443),
			SrcIPSets: []string{"a"}, NotSrcIPSets: []string{"b"}, NotDstNets: nets("10.0.0.0/8")},
			[]pkt{tcp("10.0.0.1", "1.1.1.1", 1, 443), tcp("10.0.0.5", "1.1.1.1", 1, 443), tcp("10.0.0.1", "10.1.1.1", 1, 443),
				tcp("10.0.0.1", "1.1.1.1", 1, 444), udp("10.0.0.1", "1.1.1.1", 1, 443)},
			[]string{allowed, denied, denied, denied, denied}},
		{"deny rule", model.Rule{Action: model.ActionDeny, Protocol: proto("tcp")},
			[]pkt{tcp("1.1.1.1", "2.2.2.2", 1, 1)}, []string{"p#0"}},
	}
}

func TestMatchMatrix(t *testing.T) {
	h := newHarness(t)
	fillTestSets(h)
	for _, c := range matchCases() {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			prog := h.load(allowIf(c.rule), testSets, Options{})
			for i, p := range c.pkts {
				ret, res := h.run(prog, p)
				got := ruleName(prog.Rules(), res.RuleID)
				wantRet := uint32(retDeny)
				if c.want[i] == allowed && c.rule.Action != model.ActionDeny {
					wantRet = retAllow
				}
				if got != c.want[i] || ret != wantRet {
					t.Errorf("packet %d %+v: decided by %s (ret %d), want %s (ret %d)", i, p, got, ret, c.want[i], wantRet)
				}
			}
		})
	}
}

// TestFailClosed covers both epilogue calls: direct into Maps.Epilogue and
// indirect through dpd_jump (no Maps.Epilogue). Each must reach the
// epilogue, and fail closed once it is gone from its array.
func TestFailClosed(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			h := newHarness(t)
			arr := h.maps.Epilogue
			if !direct {
				h.maps.Epilogue = nil
				arr = h.maps.Jump
			}
			prog := h.load(allowIf(model.Rule{}), testSets, Options{})
			if ret, _ := h.run(prog, tcp("1.1.1.1", "2.2.2.2", 1, 1)); ret != retAllow {
				t.Fatalf("with epilogue: ret %d, want %d", ret, retAllow)
			}
			if err := arr.Delete(uint32(abi.JumpEpilogue)); err != nil {
				t.Fatal(err)
			}
			if ret, _ := h.run(prog, tcp("1.1.1.1", "2.2.2.2", 1, 1)); ret != abi.TCActShot {
				t.Fatalf("without epilogue: ret %d, want TC_ACT_SHOT", ret)
			}
		})
	}
}
