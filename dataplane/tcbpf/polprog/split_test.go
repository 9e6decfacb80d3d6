package polprog

import (
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// portRules is n TCP dst-port rules (port base+i) that deny, the last allows.
func portRules(n int, base uint16) []model.Rule {
	rules := make([]model.Rule, n)
	for i := range rules {
		p := base + uint16(i)
		rules[i] = model.Rule{Action: model.ActionDeny, Protocol: proto("tcp"), DstPorts: ports(p, p)}
	}
	rules[n-1].Action = model.ActionAllow
	return rules
}

// cidrRules is n /32 source CIDR rules (10.x.y.z) that deny, the last allows.
func cidrRules(n int) []model.Rule {
	rules := make([]model.Rule, n)
	for i := range rules {
		rules[i] = model.Rule{Action: model.ActionDeny, SrcNets: []netip.Prefix{netip.PrefixFrom(cidrAddr(i), 32)}}
	}
	rules[n-1].Action = model.ActionAllow
	return rules
}

func cidrAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) }

func TestSplit2000Rules(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name  string
		rules []model.Rule
		pkts  []pkt
		want  []string
	}{
		{"tcp dst ports", portRules(2000, 10000),
			[]pkt{tcp("1.1.1.1", "2.2.2.2", 1, 10000), tcp("1.1.1.1", "2.2.2.2", 1, 11999), tcp("1.1.1.1", "2.2.2.2", 1, 9999),
				udp("1.1.1.1", "2.2.2.2", 1, 11999)},
			[]string{"p#0", "+p#1999", "default:t", "default:t"}},
		{"cidrs", cidrRules(2000),
			[]pkt{tcp(cidrAddr(0).String(), "2.2.2.2", 1, 1), tcp(cidrAddr(1999).String(), "2.2.2.2", 1, 1),
				tcp(cidrAddr(2000).String(), "2.2.2.2", 1, 1)},
			[]string{"p#0", "+p#1999", "default:t"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			pol := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", c.rules...))}}
			spec, err := Compile(&pol, model.Ingress, testSets, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if spec.NumChunks() < 2 {
				t.Fatalf("2000 rules compiled into %d chunk(s), want a split", spec.NumChunks())
			}
			prog := h.load(&pol, testSets, Options{})
			checkFlows(t, h, prog, c.pkts, c.want)
			t.Logf("%d chunks", spec.NumChunks())
		})
	}
}

// TestPassAcrossChunks: a Pass at the start of a long tier continues at the
// next tier, which lives chunks later, directly (one tail call).
func TestPassAcrossChunks(t *testing.T) {
	h := newHarness(t)
	t1 := append([]model.Rule{{Action: model.ActionPass, Protocol: proto("udp")}}, portRules(3000, 10000)...)
	p := model.DirectionPolicy{
		Tiers: []model.Tier{
			tier("t1", deny, pol("p1", t1...)),
			tier("t2", pass, pol("p2", model.Rule{Action: model.ActionAllow, DstPorts: ports(53, 53)})),
		},
		Profiles: []model.PolicyRules{prof("prof", model.Rule{Action: model.ActionDeny})},
	}
	spec, err := Compile(&p, model.Ingress, testSets, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if spec.NumChunks() < 3 {
		t.Fatalf("%d chunks, want at least 3", spec.NumChunks())
	}
	prog := h.load(&p, testSets, Options{})
	checkFlows(t, h, prog,
		[]pkt{udp("1.1.1.1", "2.2.2.2", 1, 53), udp("1.1.1.1", "2.2.2.2", 1, 54), tcp("1.1.1.1", "2.2.2.2", 1, 12999), icmpPkt},
		[]string{"+p2#0", "prof#0", "+p1#3000", "default:t1"})
	_, res := h.run(prog, udp("1.1.1.1", "2.2.2.2", 1, 53))
	if want := uint32(3002); res.ChainPos != want { // block of t2's first rule
		t.Errorf("chain_pos %d after a pass to t2, want %d", res.ChainPos, want)
	}
}

// TestOversizedRule: one rule larger than a chunk gets a chunk of its own
// and still verifies.
func TestOversizedRule(t *testing.T) {
	h := newHarness(t)
	huge := model.Rule{Action: model.ActionAllow, Protocol: proto("tcp")}
	for i := range 3000 {
		huge.SrcNets = append(huge.SrcNets, netip.PrefixFrom(cidrAddr(i), 32))
	}
	p := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny,
		pol("p", rule(deny, proto("udp")), huge, rule(logA, nil)))}}
	prog := h.load(&p, testSets, Options{MaxChunkInsns: 1000})
	checkFlows(t, h, prog,
		[]pkt{tcp(cidrAddr(2999).String(), "2.2.2.2", 1, 1), tcp(cidrAddr(3000).String(), "2.2.2.2", 1, 1), udpPkt},
		[]string{"+p#1", "default:t", "p#0"})
}

func TestCloseReleasesChain(t *testing.T) {
	h := newHarness(t)
	pol := model.DirectionPolicy{Tiers: []model.Tier{tier("t", deny, pol("p", portRules(2000, 10000)...))}}
	spec, err := Compile(&pol, model.Ingress, testSets, Options{MaxChunkInsns: 1000})
	if err != nil {
		t.Fatal(err)
	}
	before := chainInUse(h.maps.Chain)
	prog, err := spec.Load(h.maps)
	if err != nil {
		t.Fatal(err)
	}
	if got := chainInUse(h.maps.Chain) - before; got != spec.NumChunks()-1 {
		t.Errorf("%d chain indices taken, want %d", got, spec.NumChunks()-1)
	}
	if ret, _ := h.run(prog, tcp("1.1.1.1", "2.2.2.2", 1, 11999)); ret != retAllow {
		t.Errorf("ret %d, want allow", ret)
	}
	countChain := func() int {
		var n int
		var k, v uint32
		iter := h.maps.Chain.Iterate()
		for iter.Next(&k, &v) {
			n++
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("iterate %s: %v", "dpd_chain", err)
		}
		return n
	}
	if n := countChain(); n != spec.NumChunks()-1 {
		t.Errorf("%d dpd_chain entries while loaded, want %d", n, spec.NumChunks()-1)
	}
	if err := prog.Close(); err != nil {
		t.Fatal(err)
	}
	if err := prog.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if got := chainInUse(h.maps.Chain); got != before {
		t.Errorf("%d chain indices in use after close, want %d", got, before)
	}
	if prog.Head() != nil {
		t.Error("Head after Close is not nil")
	}
	if n := countChain(); n != 0 {
		t.Errorf("%d dpd_chain entries left after close", n)
	}
}
