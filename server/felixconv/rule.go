package felixconv

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

var protocolNames = map[string]uint8{
	"tcp": model.ProtoTCP, "udp": model.ProtoUDP, "icmp": model.ProtoICMP,
	"icmpv6": model.ProtoICMPv6, "sctp": model.ProtoSCTP, "udplite": model.ProtoUDPLite,
}

// Action parses a rule action: allow, deny, pass (or its older name
// next-tier) and log, case-insensitive. An empty action is refused rather
// than guessed: Felix always names it, so "" means a broken sender.
func Action(s string) (model.Action, error) {
	switch strings.ToLower(s) {
	case "allow":
		return model.ActionAllow, nil
	case "deny":
		return model.ActionDeny, nil
	case "pass", "next-tier":
		return model.ActionPass, nil
	case "log":
		return model.ActionLog, nil
	}
	return 0, fmt.Errorf("unknown action %q", s)
}

// Protocol parses a rule protocol: nil (or neither number nor name set)
// means "any" and returns nil.
func Protocol(p *felix.Protocol) (*uint8, error) {
	if p == nil {
		return nil, nil
	}
	switch v := p.GetNumberOrName().(type) {
	case nil:
		return nil, nil
	case *felix.Protocol_Number:
		if v == nil {
			return nil, errors.New("protocol: nil number")
		}
		if v.Number < 0 || v.Number > 255 {
			return nil, fmt.Errorf("protocol number %d out of range 0-255", v.Number)
		}
		n := uint8(v.Number)
		return &n, nil
	case *felix.Protocol_Name:
		if v == nil {
			return nil, errors.New("protocol: nil name")
		}
		if n, ok := protocolNames[strings.ToLower(v.Name)]; ok {
			return &n, nil
		}
		// A number sent as a name ("47") is unambiguous; take it.
		if n, err := strconv.ParseUint(v.Name, 10, 8); err == nil {
			b := uint8(n)
			return &b, nil
		}
		return nil, fmt.Errorf("unknown protocol %q", v.Name)
	}
	return nil, fmt.Errorf("protocol: unexpected %T", p.GetNumberOrName())
}

func portRanges(field string, rs []*felix.PortRange) ([]model.PortRange, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	out := make([]model.PortRange, 0, len(rs))
	for i, r := range rs {
		if r == nil {
			return nil, fmt.Errorf("%s[%d]: nil", field, i)
		}
		if r.First < 0 || r.First > 65535 || r.Last < 0 || r.Last > 65535 {
			return nil, fmt.Errorf("%s[%d]: port range %d-%d outside 0-65535", field, i, r.First, r.Last)
		}
		if r.First > r.Last {
			return nil, fmt.Errorf("%s[%d]: port range %d-%d has first > last", field, i, r.First, r.Last)
		}
		out = append(out, model.PortRange{First: uint16(r.First), Last: uint16(r.Last)})
	}
	return out, nil
}

func icmpMatch(field string, typ, code int32, hasCode bool) (*model.ICMPMatch, error) {
	if typ < 0 || typ > 255 {
		return nil, fmt.Errorf("%s: icmp type %d out of range 0-255", field, typ)
	}
	if code < 0 || code > 255 {
		return nil, fmt.Errorf("%s: icmp code %d out of range 0-255", field, code)
	}
	return &model.ICMPMatch{Type: uint8(typ), Code: uint8(code), HasCode: hasCode}, nil
}

func ruleICMP(r *felix.Rule) (pos, neg *model.ICMPMatch, err error) {
	switch v := r.GetIcmp().(type) {
	case nil:
	case *felix.Rule_IcmpType:
		if v == nil {
			return nil, nil, errors.New("icmp_type: nil")
		}
		pos, err = icmpMatch("icmp_type", v.IcmpType, 0, false)
	case *felix.Rule_IcmpTypeCode:
		if v == nil || v.IcmpTypeCode == nil {
			return nil, nil, errors.New("icmp_type_code: nil")
		}
		pos, err = icmpMatch("icmp_type_code", v.IcmpTypeCode.Type, v.IcmpTypeCode.Code, true)
	}
	if err != nil {
		return nil, nil, err
	}
	switch v := r.GetNotIcmp().(type) {
	case nil:
	case *felix.Rule_NotIcmpType:
		if v == nil {
			return nil, nil, errors.New("not_icmp_type: nil")
		}
		neg, err = icmpMatch("not_icmp_type", v.NotIcmpType, 0, false)
	case *felix.Rule_NotIcmpTypeCode:
		if v == nil || v.NotIcmpTypeCode == nil {
			return nil, nil, errors.New("not_icmp_type_code: nil")
		}
		neg, err = icmpMatch("not_icmp_type_code", v.NotIcmpTypeCode.Type, v.NotIcmpTypeCode.Code, true)
	}
	return pos, neg, err
}

// Rule parses one Felix rule. Protocol names are tcp, udp, icmp, icmpv6,
// sctp and udplite (any case) or a number 0-255; nets are CIDRs or bare
// addresses; ports are 0-65535 with first <= last; ICMP type and code are
// 0-255. The ID is r.RuleId, or a stable hash of the parsed rule.
func Rule(r *felix.Rule) (model.Rule, error) {
	if r == nil {
		return model.Rule{}, errors.New("nil rule")
	}
	var out model.Rule
	var err error
	if out.Action, err = Action(r.Action); err != nil {
		return model.Rule{}, err
	}
	switch r.IpVersion {
	case felix.IPVersion_ANY, felix.IPVersion_IPV4, felix.IPVersion_IPV6:
		out.IPVersion = uint8(r.IpVersion)
	default:
		return model.Rule{}, fmt.Errorf("ip_version %d is not 0, 4 or 6", r.IpVersion)
	}
	if out.Protocol, err = Protocol(r.Protocol); err != nil {
		return model.Rule{}, fmt.Errorf("protocol: %w", err)
	}
	if out.NotProtocol, err = Protocol(r.NotProtocol); err != nil {
		return model.Rule{}, fmt.Errorf("not_protocol: %w", err)
	}
	if out.SrcNets, err = prefixList("src_net", r.SrcNet); err != nil {
		return model.Rule{}, err
	}
	if out.NotSrcNets, err = prefixList("not_src_net", r.NotSrcNet); err != nil {
		return model.Rule{}, err
	}
	if out.DstNets, err = prefixList("dst_net", r.DstNet); err != nil {
		return model.Rule{}, err
	}
	if out.NotDstNets, err = prefixList("not_dst_net", r.NotDstNet); err != nil {
		return model.Rule{}, err
	}
	if out.SrcPorts, err = portRanges("src_ports", r.SrcPorts); err != nil {
		return model.Rule{}, err
	}
	if out.NotSrcPorts, err = portRanges("not_src_ports", r.NotSrcPorts); err != nil {
		return model.Rule{}, err
	}
	if out.DstPorts, err = portRanges("dst_ports", r.DstPorts); err != nil {
		return model.Rule{}, err
	}
	if out.NotDstPorts, err = portRanges("not_dst_ports", r.NotDstPorts); err != nil {
		return model.Rule{}, err
	}
	if out.ICMP, out.NotICMP, err = ruleICMP(r); err != nil {
		return model.Rule{}, err
	}
	for _, s := range []struct {
		field string
		in    []string
		dst   *[]string
	}{
		{"src_ip_set_ids", r.SrcIpSetIds, &out.SrcIPSets},
		{"not_src_ip_set_ids", r.NotSrcIpSetIds, &out.NotSrcIPSets},
		{"dst_ip_set_ids", r.DstIpSetIds, &out.DstIPSets},
		{"not_dst_ip_set_ids", r.NotDstIpSetIds, &out.NotDstIPSets},
		{"src_named_port_ip_set_ids", r.SrcNamedPortIpSetIds, &out.SrcNamedPortSets},
		{"not_src_named_port_ip_set_ids", r.NotSrcNamedPortIpSetIds, &out.NotSrcNamedPortSets},
		{"dst_named_port_ip_set_ids", r.DstNamedPortIpSetIds, &out.DstNamedPortSets},
		{"not_dst_named_port_ip_set_ids", r.NotDstNamedPortIpSetIds, &out.NotDstNamedPortSets},
		{"dst_ip_port_set_ids", r.DstIpPortSetIds, &out.DstIPPortSets},
	} {
		if err := nonEmpty(s.field, s.in); err != nil {
			return model.Rule{}, err
		}
		if len(s.in) > 0 {
			*s.dst = append([]string(nil), s.in...)
		}
	}
	out.ID = r.RuleId
	if out.ID == "" {
		out.ID = generatedRuleID(&out)
	}
	return out, nil
}

// Rules parses a rule list. Generated IDs of identical rules would collide,
// so later duplicates get "-2", "-3", ... appended; upstream IDs are kept.
func Rules(rs []*felix.Rule) ([]model.Rule, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	out := make([]model.Rule, 0, len(rs))
	seen := make(map[string]int, len(rs))
	for i, r := range rs {
		mr, err := Rule(r)
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		if r.RuleId == "" {
			seen[mr.ID]++
			if n := seen[mr.ID]; n > 1 {
				mr.ID = fmt.Sprintf("%s-%d", mr.ID, n)
			}
		}
		out = append(out, mr)
	}
	return out, nil
}

// generatedRuleID hashes what the rule enforces, so the same rule gets the
// same ID in every session and on every node.
func generatedRuleID(r *model.Rule) string {
	h := sha256.New()
	opt := func(p *uint8) int {
		if p == nil {
			return -1
		}
		return int(*p)
	}
	icmp := func(m *model.ICMPMatch) string {
		if m == nil {
			return "-"
		}
		return fmt.Sprintf("%d/%d/%t", m.Type, m.Code, m.HasCode)
	}
	// hash.Hash writes never fail; one Fprintf keeps errcheck honest.
	_, _ = fmt.Fprintf(h, "%v|%d|%d|%d|%s|%s|%v|%v|%v|%v|%v|%v|%v|%v|%q|%q|%q|%q|%q|%q|%q|%q|%q",
		r.Action, r.IPVersion, opt(r.Protocol), opt(r.NotProtocol), icmp(r.ICMP), icmp(r.NotICMP),
		r.SrcNets, r.NotSrcNets, r.DstNets, r.NotDstNets,
		r.SrcPorts, r.NotSrcPorts, r.DstPorts, r.NotDstPorts,
		r.SrcIPSets, r.NotSrcIPSets, r.DstIPSets, r.NotDstIPSets,
		r.SrcNamedPortSets, r.NotSrcNamedPortSets, r.DstNamedPortSets, r.NotDstNamedPortSets, r.DstIPPortSets)
	return "dpd-" + hex.EncodeToString(h.Sum(nil)[:8])
}
