package e2e

import (
	"fmt"
	"testing"

	"github.com/dpd-dev/dpd/proto/felix"
)

// ipv6Cases are the IPv6 forms of the matrix cases whose IPv4 forms name
// IPv4 literals: ICMPv6 types and their negation, CIDRs and their
// negations, IP sets (with deltas) and named ports with IPv6 members.
// e's workloads are the IPv6 views.
func ipv6Cases() []policyCase {
	return []policyCase{
		{"icmpv6-type", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("echo-req6", Allow(Proto("icmpv6"), ICMPType(128)))))
			Expect(t, Allowed(Ping(e.a, e.b.IP)), Denied(TCP(e.a, e.b.IP, tcpPort)))
			e.apply(t, e.onB("", profAllowAll, inB("echo-reply6-only",
				Allow(ProtoNum(58), ICMPType(129)), Allow(Proto("tcp")))))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpPort)), Denied(Ping(e.a, e.b.IP)))
			e.apply(t, e.onB("", profAllowAll, inB("echo-req6-code", Allow(Proto("icmpv6"), ICMPTypeCode(128, 0)))))
			Expect(t, Allowed(Ping(e.a, e.b.IP)))
		}},
		{"not_icmp_type6", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("no-echo-req6",
				Allow(Proto("icmpv6"), NotICMPType(128)), Allow(Proto("tcp")))))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpPort)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"not_src_net6", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("not-from-a6", Allow(NotSrcNet(hostNet(e.a.IP))))))
			Expect(t, Allowed(Ping(e.cl, e.b.IP)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"src_net_dst_net6", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("from-c6", Allow(SrcNet(hostNet(e.cl.IP)), DstNet(hostNet(e.b.IP))))))
			Expect(t, Allowed(Ping(e.cl, e.b.IP)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"not_dst_net6", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("not-to-b6",
				Allow(Proto("icmpv6"), NotDstNet(hostNet(e.b.IP))),
				Allow(Proto("tcp"), NotDstNet("fd00:99::/32")))))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpPort)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"src-ipset6-delta", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll,
				inB("from-clients6", Allow(SrcIPSets("clients6"))),
				IPSet("clients6", felix.IPSetUpdate_IP, e.cl.IP)))
			Expect(t, Allowed(Ping(e.cl, e.b.IP)), Denied(Ping(e.a, e.b.IP)))
			e.send(t, IPSetDelta("clients6", []string{e.a.IP}, nil))
			Expect(t, Allowed(Ping(e.a, e.b.IP)), Allowed(TCP(e.a, e.b.IP, tcpPort)))
			e.send(t, IPSetDelta("clients6", nil, []string{e.a.IP}))
			Expect(t, Allowed(Ping(e.cl, e.b.IP)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"named-port6", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll,
				inB("named-http6", Allow(Proto("tcp"), DstNamedPorts("np-b-http6"))),
				IPSet("np-b-http6", felix.IPSetUpdate_IP_AND_PORT, fmt.Sprintf("%s,tcp:%d", e.b.IP, tcpPort))))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpPort)), Denied(TCP(e.a, e.b.IP, tcpOther)))
		}},
	}
}
