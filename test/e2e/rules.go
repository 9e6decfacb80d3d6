package e2e

import "github.com/dpd-dev/dpd/proto/felix"

// RuleOpt sets one match of a rule. There is one for every match form the
// Felix Rule carries, positive and negated.
type RuleOpt func(*felix.Rule)

// Allow, Deny and Pass build a rule with that action and the given matches.
func Allow(opts ...RuleOpt) *felix.Rule { return rule("allow", opts) }

// Deny builds a deny rule.
func Deny(opts ...RuleOpt) *felix.Rule { return rule("deny", opts) }

// Pass builds a pass rule (jump to the next tier).
func Pass(opts ...RuleOpt) *felix.Rule { return rule("pass", opts) }

func rule(action string, opts []RuleOpt) *felix.Rule {
	r := &felix.Rule{Action: action}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Rules is shorthand for a rule list.
func Rules(rs ...*felix.Rule) []*felix.Rule { return rs }

// Port is a single port; Ports is an inclusive range.
func Port(p int32) *felix.PortRange { return &felix.PortRange{First: p, Last: p} }

// Ports is the inclusive range first..last.
func Ports(first, last int32) *felix.PortRange { return &felix.PortRange{First: first, Last: last} }

func protoName(name string) *felix.Protocol {
	return &felix.Protocol{NumberOrName: &felix.Protocol_Name{Name: name}}
}

// IPv4Only restricts the rule to IPv4.
func IPv4Only() RuleOpt { return func(r *felix.Rule) { r.IpVersion = felix.IPVersion_IPV4 } }

// IPv6Only restricts the rule to IPv6.
func IPv6Only() RuleOpt { return func(r *felix.Rule) { r.IpVersion = felix.IPVersion_IPV6 } }

// Proto matches a protocol by name ("tcp", "udp", "icmp", ...).
func Proto(name string) RuleOpt { return func(r *felix.Rule) { r.Protocol = protoName(name) } }

// ProtoNum matches a protocol by number.
func ProtoNum(n int32) RuleOpt {
	return func(r *felix.Rule) { r.Protocol = &felix.Protocol{NumberOrName: &felix.Protocol_Number{Number: n}} }
}

// NotProto matches every protocol but name.
func NotProto(name string) RuleOpt { return func(r *felix.Rule) { r.NotProtocol = protoName(name) } }

// SrcNet matches source CIDRs.
func SrcNet(cidrs ...string) RuleOpt { return func(r *felix.Rule) { r.SrcNet = cidrs } }

// NotSrcNet excludes source CIDRs.
func NotSrcNet(cidrs ...string) RuleOpt { return func(r *felix.Rule) { r.NotSrcNet = cidrs } }

// DstNet matches destination CIDRs.
func DstNet(cidrs ...string) RuleOpt { return func(r *felix.Rule) { r.DstNet = cidrs } }

// NotDstNet excludes destination CIDRs.
func NotDstNet(cidrs ...string) RuleOpt { return func(r *felix.Rule) { r.NotDstNet = cidrs } }

// SrcPorts matches source ports.
func SrcPorts(p ...*felix.PortRange) RuleOpt { return func(r *felix.Rule) { r.SrcPorts = p } }

// NotSrcPorts excludes source ports.
func NotSrcPorts(p ...*felix.PortRange) RuleOpt { return func(r *felix.Rule) { r.NotSrcPorts = p } }

// DstPorts matches destination ports.
func DstPorts(p ...*felix.PortRange) RuleOpt { return func(r *felix.Rule) { r.DstPorts = p } }

// NotDstPorts excludes destination ports.
func NotDstPorts(p ...*felix.PortRange) RuleOpt { return func(r *felix.Rule) { r.NotDstPorts = p } }

// ICMPType matches an ICMP type.
func ICMPType(typ int32) RuleOpt {
	return func(r *felix.Rule) { r.Icmp = &felix.Rule_IcmpType{IcmpType: typ} }
}

// ICMPTypeCode matches an ICMP type and code.
func ICMPTypeCode(typ, code int32) RuleOpt {
	return func(r *felix.Rule) {
		r.Icmp = &felix.Rule_IcmpTypeCode{IcmpTypeCode: &felix.IcmpTypeAndCode{Type: typ, Code: code}}
	}
}

// NotICMPType excludes an ICMP type.
func NotICMPType(typ int32) RuleOpt {
	return func(r *felix.Rule) { r.NotIcmp = &felix.Rule_NotIcmpType{NotIcmpType: typ} }
}

// NotICMPTypeCode excludes an ICMP type and code.
func NotICMPTypeCode(typ, code int32) RuleOpt {
	return func(r *felix.Rule) {
		r.NotIcmp = &felix.Rule_NotIcmpTypeCode{NotIcmpTypeCode: &felix.IcmpTypeAndCode{Type: typ, Code: code}}
	}
}

// SrcIPSets requires the source in every listed set.
func SrcIPSets(ids ...string) RuleOpt { return func(r *felix.Rule) { r.SrcIpSetIds = ids } }

// NotSrcIPSets requires the source in none of the sets.
func NotSrcIPSets(ids ...string) RuleOpt { return func(r *felix.Rule) { r.NotSrcIpSetIds = ids } }

// DstIPSets requires the destination in every listed set.
func DstIPSets(ids ...string) RuleOpt { return func(r *felix.Rule) { r.DstIpSetIds = ids } }

// NotDstIPSets requires the destination in none of the sets.
func NotDstIPSets(ids ...string) RuleOpt { return func(r *felix.Rule) { r.NotDstIpSetIds = ids } }

// SrcNamedPorts matches source IP+port against IP_AND_PORT sets.
func SrcNamedPorts(ids ...string) RuleOpt {
	return func(r *felix.Rule) { r.SrcNamedPortIpSetIds = ids }
}

// NotSrcNamedPorts excludes source IP+port in IP_AND_PORT sets.
func NotSrcNamedPorts(ids ...string) RuleOpt {
	return func(r *felix.Rule) { r.NotSrcNamedPortIpSetIds = ids }
}

// DstNamedPorts matches destination IP+port against IP_AND_PORT sets.
func DstNamedPorts(ids ...string) RuleOpt {
	return func(r *felix.Rule) { r.DstNamedPortIpSetIds = ids }
}

// NotDstNamedPorts excludes destination IP+port in IP_AND_PORT sets.
func NotDstNamedPorts(ids ...string) RuleOpt {
	return func(r *felix.Rule) { r.NotDstNamedPortIpSetIds = ids }
}

// DstIPPortSets matches destination IP+port against service IP_AND_PORT sets.
func DstIPPortSets(ids ...string) RuleOpt { return func(r *felix.Rule) { r.DstIpPortSetIds = ids } }
