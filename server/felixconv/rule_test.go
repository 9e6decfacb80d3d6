package felixconv

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

func pname(s string) *felix.Protocol {
	return &felix.Protocol{NumberOrName: &felix.Protocol_Name{Name: s}}
}

func pnum(n int32) *felix.Protocol {
	return &felix.Protocol{NumberOrName: &felix.Protocol_Number{Number: n}}
}

func u8(v uint8) *uint8 { return &v }

func TestAction(t *testing.T) {
	tests := []struct {
		in   string
		want model.Action
		err  bool
	}{
		{"allow", model.ActionAllow, false},
		{"Allow", model.ActionAllow, false},
		{"DENY", model.ActionDeny, false},
		{"pass", model.ActionPass, false},
		{"next-tier", model.ActionPass, false},
		{"Next-Tier", model.ActionPass, false},
		{"log", model.ActionLog, false},
		{"", 0, true},
		{"drop", 0, true},
		{"allow ", 0, true},
	}
	for _, tc := range tests {
		got, err := Action(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Action(%q) = %v, %v; want %v, err=%t", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestProtocol(t *testing.T) {
	tests := []struct {
		name string
		in   *felix.Protocol
		want *uint8
		err  string
	}{
		{"nil is any", nil, nil, ""},
		{"unset is any", &felix.Protocol{}, nil, ""},
		{"tcp", pname("tcp"), u8(6), ""},
		{"TCP upper", pname("TCP"), u8(6), ""},
		{"udp", pname("udp"), u8(17), ""},
		{"icmp", pname("icmp"), u8(1), ""},
		{"icmpv6 mixed case", pname("ICMPv6"), u8(58), ""},
		{"sctp", pname("sctp"), u8(132), ""},
		{"udplite", pname("UDPLite"), u8(136), ""},
		{"number as name", pname("47"), u8(47), ""},
		{"number", pnum(6), u8(6), ""},
		{"number 0", pnum(0), u8(0), ""},
		{"number 255", pnum(255), u8(255), ""},
		{"number 256", pnum(256), nil, "out of range"},
		{"negative", pnum(-1), nil, "out of range"},
		{"unknown name", pname("gre"), nil, "unknown protocol"},
		{"empty name", pname(""), nil, "unknown protocol"},
		{"name 256", pname("256"), nil, "unknown protocol"},
		{"typed nil number", &felix.Protocol{NumberOrName: (*felix.Protocol_Number)(nil)}, nil, "nil number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Protocol(tc.in)
			checkErr(t, err, tc.err)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", deref(got), deref(tc.want))
			}
		})
	}
}

func deref(p *uint8) any {
	if p == nil {
		return nil
	}
	return *p
}

// checkErr fails unless err is nil and want is "", or err contains want.
func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

func TestRuleErrors(t *testing.T) {
	ok := func(f func(r *felix.Rule)) *felix.Rule {
		r := &felix.Rule{Action: "allow"}
		f(r)
		return r
	}
	tests := []struct {
		name string
		rule *felix.Rule
		err  string
	}{
		{"nil rule", nil, "nil rule"},
		{"no action", &felix.Rule{}, "unknown action"},
		{"bad action", &felix.Rule{Action: "reject"}, "unknown action"},
		{"bad ip version", ok(func(r *felix.Rule) { r.IpVersion = 5 }), "ip_version"},
		{"bad protocol", ok(func(r *felix.Rule) { r.Protocol = pname("foo") }), "protocol: unknown"},
		{"bad not_protocol", ok(func(r *felix.Rule) { r.NotProtocol = pnum(300) }), "not_protocol"},
		{"bad src cidr", ok(func(r *felix.Rule) { r.SrcNet = []string{"10.0.0.0/33"} }), "src_net[0]"},
		{"bad dst addr", ok(func(r *felix.Rule) { r.DstNet = []string{"1.2.3.4", "nope"} }), "dst_net[1]"},
		{"bad not_src_net", ok(func(r *felix.Rule) { r.NotSrcNet = []string{""} }), "not_src_net[0]"},
		{"bad not_dst_net", ok(func(r *felix.Rule) { r.NotDstNet = []string{"fe80::1%eth0"} }), "not_dst_net[0]"},
		{"port too big", ok(func(r *felix.Rule) { r.DstPorts = []*felix.PortRange{{First: 1, Last: 65536}} }), "dst_ports[0]"},
		{"negative port", ok(func(r *felix.Rule) { r.SrcPorts = []*felix.PortRange{{First: -1, Last: 5}} }), "src_ports[0]"},
		{"first > last", ok(func(r *felix.Rule) { r.NotDstPorts = []*felix.PortRange{{First: 90, Last: 80}} }), "first > last"},
		{"nil port range", ok(func(r *felix.Rule) { r.NotSrcPorts = []*felix.PortRange{nil} }), "not_src_ports[0]: nil"},
		{"icmp type 256", ok(func(r *felix.Rule) { r.Icmp = &felix.Rule_IcmpType{IcmpType: 256} }), "icmp type 256"},
		{"icmp code 256", ok(func(r *felix.Rule) {
			r.Icmp = &felix.Rule_IcmpTypeCode{IcmpTypeCode: &felix.IcmpTypeAndCode{Type: 3, Code: 256}}
		}), "icmp code 256"},
		{"nil icmp type code", ok(func(r *felix.Rule) { r.Icmp = &felix.Rule_IcmpTypeCode{} }), "icmp_type_code: nil"},
		{"not icmp negative", ok(func(r *felix.Rule) { r.NotIcmp = &felix.Rule_NotIcmpType{NotIcmpType: -1} }), "not_icmp_type"},
		{"empty ip set id", ok(func(r *felix.Rule) { r.DstIpSetIds = []string{"s:a", ""} }), "dst_ip_set_ids[1]"},
		{"empty named port set", ok(func(r *felix.Rule) { r.NotSrcNamedPortIpSetIds = []string{""} }), "not_src_named_port_ip_set_ids[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Rule(tc.rule)
			checkErr(t, err, tc.err)
		})
	}
}

func TestRuleParse(t *testing.T) {
	in := &felix.Rule{
		Action:                  "Allow",
		IpVersion:               felix.IPVersion_IPV4,
		Protocol:                pname("icmp"),
		NotProtocol:             pnum(17),
		SrcNet:                  []string{"10.0.0.0/8", "192.168.1.7"},
		NotSrcNet:               []string{"10.1.2.3/16"},
		DstNet:                  []string{"fd00::/64"},
		NotDstNet:               []string{"fd00::1"},
		SrcPorts:                []*felix.PortRange{{First: 0, Last: 0}},
		DstPorts:                []*felix.PortRange{{First: 80, Last: 80}, {First: 8000, Last: 65535}},
		NotDstPorts:             []*felix.PortRange{{First: 8080, Last: 8080}},
		Icmp:                    &felix.Rule_IcmpTypeCode{IcmpTypeCode: &felix.IcmpTypeAndCode{Type: 3, Code: 4}},
		NotIcmp:                 &felix.Rule_NotIcmpType{NotIcmpType: 8},
		SrcIpSetIds:             []string{"s:src"},
		NotDstIpSetIds:          []string{"s:notdst"},
		DstNamedPortIpSetIds:    []string{"n:web"},
		NotSrcNamedPortIpSetIds: []string{"n:notsrc"},
		DstIpPortSetIds:         []string{"svc:x"},
		RuleId:                  "upstream-id",
	}
	want := model.Rule{
		ID:                  "upstream-id",
		Action:              model.ActionAllow,
		IPVersion:           4,
		Protocol:            u8(1),
		NotProtocol:         u8(17),
		SrcNets:             []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32")},
		NotSrcNets:          []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
		DstNets:             []netip.Prefix{netip.MustParsePrefix("fd00::/64")},
		NotDstNets:          []netip.Prefix{netip.MustParsePrefix("fd00::1/128")},
		SrcPorts:            []model.PortRange{{First: 0, Last: 0}},
		DstPorts:            []model.PortRange{{First: 80, Last: 80}, {First: 8000, Last: 65535}},
		NotDstPorts:         []model.PortRange{{First: 8080, Last: 8080}},
		ICMP:                &model.ICMPMatch{Type: 3, Code: 4, HasCode: true},
		NotICMP:             &model.ICMPMatch{Type: 8},
		SrcIPSets:           []string{"s:src"},
		NotDstIPSets:        []string{"s:notdst"},
		DstNamedPortSets:    []string{"n:web"},
		NotSrcNamedPortSets: []string{"n:notsrc"},
		DstIPPortSets:       []string{"svc:x"},
	}
	got, err := Rule(in)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Rule:\n got %+v\nwant %+v", got, want)
	}
}

func TestRuleIDs(t *testing.T) {
	a := &felix.Rule{Action: "allow", Protocol: pname("tcp"), DstPorts: []*felix.PortRange{{First: 80, Last: 80}}}
	b := &felix.Rule{Action: "allow", Protocol: pnum(6), DstPorts: []*felix.PortRange{{First: 80, Last: 80}}}
	c := &felix.Rule{Action: "deny", Protocol: pname("tcp")}
	ra, _ := Rule(a)
	rb, _ := Rule(b)
	rc, _ := Rule(c)
	if ra.ID == "" || !strings.HasPrefix(ra.ID, "dpd-") {
		t.Fatalf("generated ID %q", ra.ID)
	}
	if ra.ID != rb.ID {
		t.Errorf("same enforcement, different IDs: %q %q", ra.ID, rb.ID)
	}
	if ra.ID == rc.ID {
		t.Errorf("different rules share ID %q", ra.ID)
	}
	again, _ := Rule(a)
	if again.ID != ra.ID {
		t.Errorf("ID not stable: %q then %q", ra.ID, again.ID)
	}

	rs, err := Rules([]*felix.Rule{a, c, b, {Action: "log", RuleId: "x"}, {Action: "log", RuleId: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{rs[0].ID, rs[1].ID, rs[2].ID, rs[3].ID, rs[4].ID}
	wantIDs := []string{ra.ID, rc.ID, ra.ID + "-2", "x", "x"}
	if !reflect.DeepEqual(ids, wantIDs) {
		t.Errorf("Rules IDs = %q, want %q", ids, wantIDs)
	}
	if _, err := Rules([]*felix.Rule{a, nil}); err == nil || !strings.Contains(err.Error(), "rule 1") {
		t.Errorf("nil rule in list: err = %v", err)
	}
	if rs, err := Rules(nil); rs != nil || err != nil {
		t.Errorf("Rules(nil) = %v, %v", rs, err)
	}
}
