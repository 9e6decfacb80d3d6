package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

type policyCase struct {
	name string
	run  func(t *testing.T, e *env)
}

// onB is shorthand for a scenario where B has profile bProfile and one tier
// t1 with the given default action, whose ingress policies are the policies
// among extra (in order); extra may also carry IP sets.
func (e *env) onB(defaultAction string, bProfile string, extra ...*felix.ToDataplane) Scenario {
	var names []string
	for _, m := range extra {
		if p := m.GetActivePolicyUpdate(); p != nil {
			names = append(names, p.GetId().GetName())
		}
	}
	return e.base([]string{bProfile}, []*felix.TierInfo{Tier("t1", defaultAction, names, nil)}, extra...)
}

// inB is a t1 policy with ingress rules only.
func inB(name string, rules ...*felix.Rule) *felix.ToDataplane {
	return Policy("t1", "t1."+name, rules, nil)
}

// stagedInB is a staged (StagedGlobalNetworkPolicy) t1 policy with
// ingress rules only: recorded by dpd, never enforced.
func stagedInB(name string, rules ...*felix.Rule) *felix.ToDataplane {
	m := inB(name, rules...)
	m.GetActivePolicyUpdate().Id.Kind = "StagedGlobalNetworkPolicy"
	return m
}

// traceB traces a TCP packet from A to B's port and checks what decided
// and, when a policy did, that it is want; a staged policy must never be
// named, whatever decided.
func (e *env) traceB(t *testing.T, port uint32, verdict, decidedBy, want string) {
	t.Helper()
	tr, err := e.d.Client(t).Inspect().Trace(context.Background(), &dpdv1.TraceRequest{
		Endpoint: "k8s/ns/" + e.b.Pod + "/eth0", Direction: "ingress", Protocol: "tcp",
		SrcIp: e.a.IP, DstIp: e.b.IP, SrcPort: 40000, DstPort: port})
	if err != nil {
		t.Fatalf("trace A -> B:%d: %v", port, err)
	}
	pol := tr.GetRule().GetPolicy()
	if tr.GetVerdict() != verdict || tr.GetDecidedBy() != decidedBy || strings.Contains(pol, "staged") ||
		(want != "" && !strings.HasSuffix(pol, want)) {
		t.Errorf("trace A -> B:%d = %v, want %s by %s %s (never a staged policy)", port, tr, verdict, decidedBy, want)
	}
}

// policyCases is the packet matrix for policy on B's ingress (and B's egress
// for the no-policy case). Each case applies a complete scenario.
func policyCases() []policyCase {
	return []policyCase{
		{"profile-allow", func(t *testing.T, e *env) {
			e.apply(t, e.base([]string{profAllowAll}, nil))
			Expect(t,
				Allowed(Ping(e.a, e.b.IP)),
				Allowed(TCP(e.a, e.b.IP, tcpPort)),
				Allowed(UDP(e.a, e.b.IP, udpPort)),
				Allowed(Ping(e.b, e.a.IP)),
			)
		}},
		{"no-policy-drops", func(t *testing.T, e *env) {
			e.apply(t, e.base(nil, nil))
			Expect(t,
				Allowed(Ping(e.a, e.cl.IP)),
				Denied(Ping(e.a, e.b.IP)),
				Denied(TCP(e.a, e.b.IP, tcpPort)),
				Denied(UDP(e.a, e.b.IP, udpPort)),
				Denied(Ping(e.b, e.a.IP)), // B's egress has no policy either
			)
		}},
		{"deny-before-allow", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll,
				inB("deny-http", Deny(Proto("tcp"), DstPorts(Port(tcpPort))), Allow())))
			Expect(t,
				Allowed(TCP(e.a, e.b.IP, tcpOther)),
				Allowed(Ping(e.a, e.b.IP)),
				Denied(TCP(e.a, e.b.IP, tcpPort)),
			)
		}},
		{"pass-rule-falls-to-profile", func(t *testing.T, e *env) {
			pol := inB("pass-all", Pass())
			e.apply(t, e.onB("", profAllowAll, pol))
			Expect(t, Allowed(Ping(e.a, e.b.IP)), Allowed(TCP(e.a, e.b.IP, tcpPort)))
			// The same Pass in front of a profile that allows nothing: Pass
			// neither allowed nor denied by itself.
			e.apply(t, e.onB("", profDenyAll, pol))
			Expect(t, Denied(Ping(e.a, e.b.IP)), Denied(TCP(e.a, e.b.IP, tcpPort)))
		}},
		{"tier-default-pass", func(t *testing.T, e *env) {
			pol := inB("only-9999", Allow(Proto("tcp"), DstPorts(Port(9999))))
			e.apply(t, e.onB("Pass", profAllowAll, pol))
			Expect(t, Allowed(Ping(e.a, e.b.IP)), Allowed(TCP(e.a, e.b.IP, tcpPort)))
			e.apply(t, e.onB("Pass", profDenyAll, pol))
			Expect(t, Denied(Ping(e.a, e.b.IP)), Denied(TCP(e.a, e.b.IP, tcpPort)))
		}},
		{"staged-policy-never-enforced", func(t *testing.T, e *env) {
			// A staged deny-all ahead of the enforced allow of 8081: only the
			// allow counts, and the tier still ends in Deny.
			staged := stagedInB("staged-deny", Deny())
			allow := inB("only-8081", Allow(Proto("tcp"), DstPorts(Port(tcpOther))))
			tier := &felix.TierInfo{Name: "t1", IngressPolicies: []*felix.PolicyID{
				staged.GetActivePolicyUpdate().GetId(), allow.GetActivePolicyUpdate().GetId()}}
			e.apply(t, e.base([]string{profAllowAll}, []*felix.TierInfo{tier}, staged, allow))
			Expect(t,
				Allowed(TCP(e.a, e.b.IP, tcpOther)),
				Denied(TCP(e.a, e.b.IP, tcpPort)),
				Denied(Ping(e.a, e.b.IP)),
			)
			e.traceB(t, tcpOther, "allow", "policy", "only-8081")
			e.traceB(t, tcpPort, "deny", "tier-default", "")
		}},
		{"staged-only-tier-passes", func(t *testing.T, e *env) {
			// A tier of only staged policies does not end in its default
			// action (Deny): the profile decides.
			staged := stagedInB("staged-deny", Deny())
			tier := &felix.TierInfo{Name: "t1", DefaultAction: "Deny", IngressPolicies: []*felix.PolicyID{staged.GetActivePolicyUpdate().GetId()}}
			e.apply(t, e.base([]string{profAllowAll}, []*felix.TierInfo{tier}, staged))
			Expect(t,
				Allowed(Ping(e.a, e.b.IP)),
				Allowed(TCP(e.a, e.b.IP, tcpPort)),
				Allowed(UDP(e.a, e.b.IP, udpPort)),
			)
			e.traceB(t, tcpPort, "allow", "profile", "")
		}},
		{"tier-default-deny", func(t *testing.T, e *env) {
			pol := inB("only-8081", Allow(Proto("tcp"), DstPorts(Port(tcpOther))))
			// The profile allows all, so anything denied here was denied by
			// the end of the tier.
			e.apply(t, e.onB("", profAllowAll, pol))
			Expect(t,
				Allowed(TCP(e.a, e.b.IP, tcpOther)),
				Denied(Ping(e.a, e.b.IP)),
				Denied(TCP(e.a, e.b.IP, tcpPort)),
				Denied(UDP(e.a, e.b.IP, udpPort)),
			)
			e.apply(t, e.onB("Deny", profAllowAll, pol))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpOther)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"dst-ports-and-ranges", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("ports",
				Allow(Proto("tcp"), DstPorts(Port(tcpPort), Ports(9000, 9100))),
				Allow(Proto("udp"), DstPorts(Ports(7000, 7010))))))
			Expect(t,
				Allowed(TCP(e.a, e.b.IP, tcpPort)),
				Allowed(TCP(e.a, e.b.IP, tcpRangePort)),
				Allowed(UDP(e.a, e.b.IP, udpPort)),
				Denied(TCP(e.a, e.b.IP, tcpOther)),
				Denied(Ping(e.a, e.b.IP)),
			)
		}},
		{"named-port", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll,
				inB("named-http", Allow(Proto("tcp"), DstNamedPorts("np-b-http"))),
				IPSet("np-b-http", felix.IPSetUpdate_IP_AND_PORT, fmt.Sprintf("%s,tcp:%d", e.b.IP, tcpPort))))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpPort)), Denied(TCP(e.a, e.b.IP, tcpOther)))
		}},
		{"src-ipset-delta", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll,
				inB("from-clients", Allow(SrcIPSets("clients"))),
				IPSet("clients", felix.IPSetUpdate_IP, e.cl.IP)))
			Expect(t, Allowed(Ping(e.cl, e.b.IP)), Denied(Ping(e.a, e.b.IP)))
			e.send(t, IPSetDelta("clients", []string{e.a.IP}, nil))
			Expect(t, Allowed(Ping(e.a, e.b.IP)), Allowed(TCP(e.a, e.b.IP, tcpPort)))
			e.send(t, IPSetDelta("clients", nil, []string{e.a.IP}))
			Expect(t,
				Allowed(Ping(e.cl, e.b.IP)),
				Denied(Ping(e.a, e.b.IP)),
				Denied(TCP(e.a, e.b.IP, tcpPort)),
			)
		}},
		// Two rules test source sets, so the policy classifies sources by
		// their combination of sets; a delta that forms a new combination
		// reaches the loaded program (a combination it did not know would
		// read as no set: passed to the allowing profile).
		{"set-classified-delta", func(t *testing.T, e *env) {
			e.apply(t, e.onB("Pass", profAllowAll,
				inB("by-sets", Deny(SrcIPSets("blocked")), Allow(SrcIPSets("clients"))),
				IPSet("blocked", felix.IPSetUpdate_IP, "192.0.2.99"),
				IPSet("clients", felix.IPSetUpdate_NET, e.cl.IP+"/32", e.a.IP+"/32")))
			Expect(t, Allowed(Ping(e.a, e.b.IP)), Allowed(Ping(e.cl, e.b.IP)))
			e.send(t, IPSetDelta("blocked", []string{e.a.IP}, nil))
			Expect(t, Denied(Ping(e.a, e.b.IP)), Denied(TCP(e.a, e.b.IP, tcpPort)), Allowed(Ping(e.cl, e.b.IP)))
			e.send(t, IPSetDelta("blocked", nil, []string{e.a.IP}))
			Expect(t, Allowed(Ping(e.a, e.b.IP)), Allowed(TCP(e.a, e.b.IP, tcpPort)))
		}},
		{"negated-matches", func(t *testing.T, e *env) {
			for _, sub := range negatedCases(e) {
				t.Run(sub.name, func(t *testing.T) { sub.run(t, e) })
			}
		}},
		{"icmp-type", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("echo-req", Allow(ProtoNum(1), ICMPType(8)))))
			Expect(t, Allowed(Ping(e.a, e.b.IP)), Denied(TCP(e.a, e.b.IP, tcpPort)))
			e.apply(t, e.onB("", profAllowAll, inB("echo-reply-only",
				Allow(Proto("icmp"), ICMPType(0)), Allow(Proto("tcp")))))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpPort)), Denied(Ping(e.a, e.b.IP)))
			e.apply(t, e.onB("", profAllowAll, inB("echo-req-code", Allow(Proto("icmp"), ICMPTypeCode(8, 0)))))
			Expect(t, Allowed(Ping(e.a, e.b.IP)))
		}},
		{"policy-update-changes-verdict", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("flip", Allow())))
			Expect(t, Allowed(Ping(e.a, e.b.IP)), Allowed(TCP(e.a, e.b.IP, tcpPort)))
			// Only the policy changes; the endpoint update is not re-sent.
			e.apply(t, e.onB("", profAllowAll, inB("flip", Deny())))
			Expect(t,
				Allowed(Ping(e.a, e.cl.IP)),
				Denied(Ping(e.a, e.b.IP)),
				Denied(TCP(e.a, e.b.IP, tcpPort)),
				Denied(UDP(e.a, e.b.IP, udpPort)),
			)
			e.apply(t, e.onB("", profAllowAll, inB("flip", Allow())))
			Expect(t, Allowed(Ping(e.a, e.b.IP)))
		}},
	}
}

// negatedCases covers every not_* form the matrix needs, plus the positive
// net and set forms they mirror.
func negatedCases(e *env) []policyCase {
	aNet, bNet := e.a.IP+"/32", e.b.IP+"/32"
	return []policyCase{
		{"not_src_net", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("not-from-a", Allow(NotSrcNet(aNet)))))
			Expect(t, Allowed(Ping(e.cl, e.b.IP)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"src_net_dst_net", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("from-c", Allow(SrcNet(e.cl.IP+"/32"), DstNet(bNet)))))
			Expect(t, Allowed(Ping(e.cl, e.b.IP)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"not_dst_net", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("not-to-b",
				Allow(Proto("icmp"), NotDstNet(bNet)),
				Allow(Proto("tcp"), NotDstNet("10.99.0.0/16")))))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpPort)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"not_dst_ports", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("not-http", Allow(Proto("tcp"), NotDstPorts(Port(tcpPort))))))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpOther)), Denied(TCP(e.a, e.b.IP, tcpPort)))
		}},
		{"not_protocol", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("not-tcp", Allow(NotProto("tcp")))))
			Expect(t,
				Allowed(Ping(e.a, e.b.IP)),
				Allowed(UDP(e.a, e.b.IP, udpPort)),
				Denied(TCP(e.a, e.b.IP, tcpPort)),
			)
		}},
		{"not_src_ip_set_ids", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll,
				inB("not-blocked", Allow(NotSrcIPSets("blocked"))),
				IPSet("blocked", felix.IPSetUpdate_IP, e.a.IP)))
			Expect(t, Allowed(Ping(e.cl, e.b.IP)), Denied(Ping(e.a, e.b.IP)))
		}},
		{"dst_ip_set_ids_net", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll,
				inB("udp-to-servers", Allow(Proto("udp"), DstIPSets("servers"))),
				IPSet("servers", felix.IPSetUpdate_NET, e.b.IP+"/32")))
			Expect(t, Allowed(UDP(e.a, e.b.IP, udpPort)), Denied(TCP(e.a, e.b.IP, tcpPort)))
		}},
		{"not_icmp_type", func(t *testing.T, e *env) {
			e.apply(t, e.onB("", profAllowAll, inB("no-echo-req",
				Allow(Proto("icmp"), NotICMPType(8)), Allow(Proto("tcp")))))
			Expect(t, Allowed(TCP(e.a, e.b.IP, tcpPort)), Denied(Ping(e.a, e.b.IP)))
		}},
	}
}
