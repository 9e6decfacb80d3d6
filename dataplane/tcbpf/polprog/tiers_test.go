package polprog

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func rule(a model.Action, proto *uint8) model.Rule { return model.Rule{Action: a, Protocol: proto} }

func pol(name string, rules ...model.Rule) model.PolicyRules {
	return model.PolicyRules{Name: name, Kind: "policy", Rules: rules}
}

func prof(name string, rules ...model.Rule) model.PolicyRules {
	return model.PolicyRules{Name: name, Kind: "profile", Rules: rules}
}

func tier(name string, def model.Action, pols ...model.PolicyRules) model.Tier {
	return model.Tier{Name: name, DefaultAction: def, Policies: pols}
}

var (
	allow = model.ActionAllow
	deny  = model.ActionDeny
	pass  = model.ActionPass
	logA  = model.ActionLog
)

type flowCase struct {
	name string
	pol  model.DirectionPolicy
	pkts []pkt
	want []string // "+" prefix: allowed, else denied; then describe() of the decider
}

var (
	tcpPkt  = tcp("10.0.0.1", "10.0.0.2", 1000, 80)
	udpPkt  = udp("10.0.0.1", "10.0.0.2", 1000, 53)
	icmpPkt = icmp("10.0.0.1", "10.0.0.2", 8, 0)
)

func flowCases() []flowCase {
	return []flowCase{
		{"pass goes to next tier", model.DirectionPolicy{Tiers: []model.Tier{
			tier("t1", deny, pol("p1", rule(pass, proto("tcp")))),
			tier("t2", deny, pol("p2", rule(allow, proto("tcp"))))}},
			[]pkt{tcpPkt, udpPkt}, []string{"+p2#0", "default:t1"}},
		{"pass skips the rest of its tier", model.DirectionPolicy{Tiers: []model.Tier{
			tier("t1", deny, pol("pa", rule(pass, proto("tcp"))), pol("pb", rule(deny, nil))),
			tier("t2", deny, pol("pc", rule(allow, nil)))}},
			[]pkt{tcpPkt, udpPkt}, []string{"+pc#0", "pb#0"}},
		{"tier default pass", model.DirectionPolicy{Tiers: []model.Tier{
			tier("t1", pass, pol("p1", rule(deny, proto("udp")))),
			tier("t2", deny, pol("p2", rule(allow, proto("tcp"))))}},
			[]pkt{tcpPkt, udpPkt, icmpPkt}, []string{"+p2#0", "p1#0", "default:t2"}},
		{"profiles after tiers", model.DirectionPolicy{
			Tiers:    []model.Tier{tier("t1", pass, pol("p1", rule(deny, proto("icmp"))))},
			Profiles: []model.PolicyRules{prof("prof", rule(allow, proto("tcp")))}},
			[]pkt{tcpPkt, udpPkt, icmpPkt}, []string{"+prof#0", "no-match", "p1#0"}},
		{"tier default deny hides profiles", model.DirectionPolicy{
			Tiers:    []model.Tier{tier("t1", deny, pol("p1", rule(allow, proto("udp"))))},
			Profiles: []model.PolicyRules{prof("prof", rule(allow, nil))}},
			[]pkt{tcpPkt, udpPkt}, []string{"default:t1", "+p1#0"}},
		{"pass from last tier reaches profiles", model.DirectionPolicy{
			Tiers:    []model.Tier{tier("t1", deny, pol("p1", rule(pass, proto("tcp"))))},
			Profiles: []model.PolicyRules{prof("prof", rule(allow, nil))}},
			[]pkt{tcpPkt, udpPkt}, []string{"+prof#0", "default:t1"}},
		{"pass from last tier without profiles", model.DirectionPolicy{
			Tiers: []model.Tier{tier("t1", deny, pol("p1", rule(pass, nil)))}},
			[]pkt{tcpPkt}, []string{"no-match"}},
		{"profiles only", model.DirectionPolicy{Profiles: []model.PolicyRules{
			prof("prof1", rule(deny, proto("udp"))), prof("prof2", rule(allow, nil))}},
			[]pkt{tcpPkt, udpPkt}, []string{"+prof2#0", "prof1#0"}},
		{"pass in a profile is no match", model.DirectionPolicy{Profiles: []model.PolicyRules{
			prof("prof", rule(pass, proto("tcp")), rule(deny, proto("tcp")), rule(allow, nil))}},
			[]pkt{tcpPkt, udpPkt}, []string{"prof#1", "+prof#2"}},
		{"nothing at all", model.DirectionPolicy{}, []pkt{tcpPkt, icmpPkt}, []string{"no-match", "no-match"}},
		{"empty tier uses its default", model.DirectionPolicy{
			Tiers:    []model.Tier{tier("t1", deny, pol("p1")), tier("t2", pass, pol("p2"))},
			Profiles: []model.PolicyRules{prof("prof", rule(allow, nil))}},
			[]pkt{tcpPkt}, []string{"default:t1"}},
		{"policies in order", model.DirectionPolicy{Tiers: []model.Tier{tier("t1", deny,
			pol("pa", rule(allow, proto("udp"))), pol("pb", rule(deny, proto("tcp"))), pol("pc", rule(allow, nil)))}},
			[]pkt{tcpPkt, udpPkt, icmpPkt}, []string{"pb#0", "+pa#0", "+pc#0"}},
		{"first match wins", model.DirectionPolicy{Tiers: []model.Tier{tier("t1", deny,
			pol("p", rule(allow, proto("tcp")), rule(deny, proto("tcp")), rule(deny, nil)))}},
			[]pkt{tcpPkt, udpPkt}, []string{"+p#0", "p#2"}},
		{"log continues", model.DirectionPolicy{Tiers: []model.Tier{tier("t1", deny,
			pol("p", rule(logA, proto("tcp")), rule(allow, proto("tcp"))))}},
			[]pkt{tcpPkt, udpPkt}, []string{"+p#1", "default:t1"}},
		{"log in a profile", model.DirectionPolicy{Profiles: []model.PolicyRules{prof("prof", rule(logA, nil))}},
			[]pkt{tcpPkt}, []string{"no-match"}},
	}
}

func checkFlows(t *testing.T, h *harness, prog *Program, pkts []pkt, want []string) {
	t.Helper()
	for i, p := range pkts {
		ret, res := h.run(prog, p)
		got := ruleName(prog.Rules(), res.RuleID)
		if ret == retAllow {
			got = "+" + got
		} else if ret != retDeny {
			got = "ret?" + got
		}
		if got != want[i] {
			t.Errorf("packet %d %+v: got %s, want %s", i, p, got, want[i])
		}
	}
}

func TestTiersAndProfiles(t *testing.T) {
	h := newHarness(t)
	for _, c := range flowCases() {
		for _, budget := range []int{0, 80} { // 80: about one block per chunk
			name := c.name
			if budget > 0 {
				name += "/split"
			}
			t.Run(name, func(t *testing.T) {
				h.t = t
				prog := h.load(&c.pol, testSets, Options{MaxChunkInsns: budget})
				checkFlows(t, h, prog, c.pkts, c.want)
			})
		}
	}
}

func TestLogCounts(t *testing.T) {
	h := newHarness(t)
	p := model.DirectionPolicy{Tiers: []model.Tier{tier("t1", deny,
		pol("p", rule(logA, proto("tcp")), rule(allow, nil)))}}
	prog := h.load(&p, testSets, Options{})
	logID := prog.Rules()[0].CounterID
	checkFlows(t, h, prog, []pkt{tcpPkt, tcpPkt, udpPkt}, []string{"+p#1", "+p#1", "+p#1"})
	if pk, by := h.counter(logID); pk != 2 || by != 2*testPktLen {
		t.Errorf("log counter: %d packets %d bytes, want 2 and %d", pk, by, 2*testPktLen)
	}
	traced := tcpPkt
	traced.trace = true
	checkFlows(t, h, prog, []pkt{traced}, []string{"+p#1"})
	if pk, _ := h.counter(logID); pk != 2 {
		t.Errorf("trace run counted: %d packets, want 2", pk)
	}
	// Deciding rules are counted by the epilogue, not here; their entries
	// exist so it can.
	if pk, _ := h.counter(prog.Rules()[1].CounterID); pk != 0 {
		t.Errorf("allow rule counted by the policy program: %d", pk)
	}
}
