package tcbpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

func ap6(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

// TestIPv6Policy: IPv6 packets are decided by the compiled policy, and a
// rule's family (its CIDRs, its ip_version) keeps it to that family; a rule
// with neither applies to both.
func TestIPv6Policy(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	tcp, udp, icmpv6 := u8(6), u8(17), u8(58)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, compiledPolicy(t, d, abi.DirFromWEP,
		model.Rule{Action: model.ActionAllow, Protocol: tcp,
			DstNets: []netip.Prefix{netip.MustParsePrefix("fd00:65::2/128")}, DstPorts: []model.PortRange{{First: 443, Last: 443}}},
		model.Rule{Action: model.ActionAllow, Protocol: tcp,
			DstNets: []netip.Prefix{netip.MustParsePrefix("10.65.0.2/32")}, DstPorts: []model.PortRange{{First: 80, Last: 80}}},
		model.Rule{Action: model.ActionAllow, Protocol: udp, DstPorts: []model.PortRange{{First: 53, Last: 53}}},
		model.Rule{Action: model.ActionAllow, IPVersion: 6, Protocol: icmpv6, ICMP: &model.ICMPMatch{Type: 128}},
		model.Rule{Action: model.ActionAllow, IPVersion: 4, Protocol: tcp, DstPorts: []model.PortRange{{First: 8080, Last: 8080}}},
	)))
	a6, b6 := ap6(ip6A, 40000), ap6(ip6B, 443)
	tests := []struct {
		name  string
		frame []byte
		want  int
	}{
		{"v6 cidr rule allows v6", tcp6(a6, b6, tcpSYN), abi.TCActOK},
		{"v6 cidr rule, other port", tcp6(a6, ap6(ip6B, 444), tcpSYN), abi.TCActShot},
		{"v4 cidr rule never matches v6", tcp6(a6, ap6(ip6B, 80), tcpSYN), abi.TCActShot},
		{"v4 cidr rule allows v4", tcpPkt(ipA, ipB, 40000, 80, tcpSYN), abi.TCActOK},
		{"v6 cidr rule never matches v4", tcpPkt(ipA, ipB, 40000, 443, tcpSYN), abi.TCActShot},
		{"familyless rule allows v6", udp6(a6, ap6(ip6B, 53)), abi.TCActOK},
		{"familyless rule allows v4", udpPkt(ipA, ipB, 40000, 53), abi.TCActOK},
		{"icmpv6 echo request", icmp6(ip6A, ip6B, 128, 0, 7, nil), abi.TCActOK},
		{"icmpv6 other type", icmp6(ip6A, ip6B, 129, 0, 8, nil), abi.TCActShot},
		{"icmp type 128 over v4 is not icmpv6", icmpEcho(ipA, ipB, 128, 7), abi.TCActShot},
		{"ip_version 4 rule never matches v6", tcp6(a6, ap6(ip6B, 8080), tcpSYN), abi.TCActShot},
		{"ip_version 4 rule allows v4", tcpPkt(ipA, ipB, 40000, 8080, tcpSYN), abi.TCActOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, d, abi.DirFromWEP, ifA, tc.frame); got != tc.want {
				t.Fatalf("verdict %d, want %d", got, tc.want)
			}
		})
	}
}

// TestIPv6Conntrack: an allowed IPv6 flow's replies pass the opposite hook
// (TCP state and the ICMPv6 echo identifier as for IPv4), entries carry
// the family, and an IPv6 packet laid out like an IPv4 flow's key never
// hits that flow's entry.
func TestIPv6Conntrack(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0)))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, verdictProg(t, d, abi.VerdictDeny, 0)))
	a, b := ap6(ip6A, 40000), ap6(ip6B, 80)

	if got := run(t, d, abi.DirToWEP, ifA, tcp6(b, a, tcpSYN|tcpACK)); got != abi.TCActShot {
		t.Fatalf("reply before the flow: %d, want drop", got)
	}
	if got := run(t, d, abi.DirFromWEP, ifA, tcp6(a, b, tcpSYN)); got != abi.TCActOK {
		t.Fatalf("allowed SYN: %d", got)
	}
	key, _ := CTFlowKey(netip.AddrPortFrom(ip6A, 40000), netip.AddrPortFrom(ip6B, 80), 6, abi.DirFromWEP, uint32(ifA))
	var v ctVal
	if err := d.Maps().Conntrack.Lookup(&key, &v); err != nil {
		t.Fatalf("no IPv6 conntrack entry: %v", err)
	}
	if got := run(t, d, abi.DirToWEP, ifA, tcp6(b, a, tcpSYN|tcpACK)); got != abi.TCActOK {
		t.Fatalf("reply of the allowed flow: %d, want pass", got)
	}
	if err := d.Maps().Conntrack.Lookup(&key, &v); err != nil || v.Flags&abi.CTFEstablished == 0 {
		t.Fatalf("reply ACK did not mark established: %+v %v", v, err)
	}
	if got := run(t, d, abi.DirToWEP, ifA, tcp6(b, ap6(ip6A, 40001), tcpSYN|tcpACK)); got != abi.TCActShot {
		t.Fatalf("reply to another port: %d, want drop", got)
	}

	// ICMPv6 echo: the reply keeps the identifier and passes; the timeout
	// is ICMP's.
	if got := run(t, d, abi.DirFromWEP, ifA, icmp6(ip6A, ip6B, 128, 0, 77, nil)); got != abi.TCActOK {
		t.Fatalf("echo request: %d", got)
	}
	if got := run(t, d, abi.DirToWEP, ifA, icmp6(ip6B, ip6A, 129, 0, 77, nil)); got != abi.TCActOK {
		t.Fatalf("echo reply: %d, want pass", got)
	}
	if got := run(t, d, abi.DirToWEP, ifA, icmp6(ip6B, ip6A, 129, 0, 78, nil)); got != abi.TCActShot {
		t.Fatalf("echo reply with another identifier: %d, want drop", got)
	}
	if CTTimeout(58, 0) != CTTimeout(1, 0) {
		t.Fatalf("ICMPv6 timeout %v, ICMP's %v", CTTimeout(58, 0), CTTimeout(1, 0))
	}

	// An IPv4 flow, and an IPv6 "reply" whose addresses are the IPv4 ones
	// followed by zeros: the same key bytes but for the family.
	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40000, 80, tcpSYN)); got != abi.TCActOK {
		t.Fatalf("v4 SYN: %d", got)
	}
	a4, b4 := ipA.As4(), ipB.As4()
	var la, lb [16]byte
	copy(la[:], a4[:])
	copy(lb[:], b4[:])
	lookalike := tcp6(ap6(netip.AddrFrom16(lb), 80), ap6(netip.AddrFrom16(la), 40000), tcpSYN|tcpACK)
	if got := run(t, d, abi.DirToWEP, ifA, lookalike); got != abi.TCActShot {
		t.Fatalf("IPv6 packet with the IPv4 flow's key bytes: %d, want drop", got)
	}
	if got := run(t, d, abi.DirToWEP, ifA, tcpPkt(ipB, ipA, 80, 40000, tcpSYN|tcpACK)); got != abi.TCActOK {
		t.Fatalf("the IPv4 reply itself: %d, want pass", got)
	}

	if n, err := d.ScanConntrack(time.Now().Add(CTTimeout(58, 0) + time.Second)); err != nil || n != 1 {
		t.Fatalf("scan past the ICMP timeout: %d %v, want the echo entry", n, err)
	}
}

// TestIPv6NeighbourDiscovery: under deny-all in both directions, neighbour
// discovery and MLD still pass both ways; router advertisements, redirects
// and echo do not, nor does neighbour discovery in a fragment or on an
// interface that is not ready.
func TestIPv6NeighbourDiscovery(t *testing.T) {
	d := openTest(t, Options{})
	ifA, ifB := vethPair(t)
	deny := verdictProg(t, d, abi.VerdictDeny, 0)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, deny))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, deny))
	gw := netip.MustParseAddr("fe80::ecee:eeff:feee:eeee")
	ll := netip.MustParseAddr("fe80::1")
	solicited := netip.MustParseAddr("ff02::1:ff00:1")
	target := gw.As16()
	hop := ext6{typ: 0, body: []byte{5, 2, 0, 0, 1, 0}} // router alert
	for _, dir := range []int{abi.DirFromWEP, abi.DirToWEP} {
		src, dst := ll, gw
		if dir == abi.DirToWEP {
			src, dst = gw, ll
		}
		tests := []struct {
			name  string
			frame []byte
			want  int
		}{
			{"neighbour solicitation", icmp6(src, solicited, 135, 0, 0, target[:]), abi.TCActOK},
			{"neighbour advertisement", icmp6(src, dst, 136, 0, 0, target[:]), abi.TCActOK},
			{"router solicitation", icmp6(src, netip.MustParseAddr("ff02::2"), 133, 0, 0, nil), abi.TCActOK},
			{"mld query", icmp6(src, netip.MustParseAddr("ff02::1"), 130, 0, 0, make([]byte, 16)), abi.TCActOK},
			{"mld report after hop-by-hop", ipv6Frame(src, netip.MustParseAddr("ff02::16"), []ext6{hop}, 58,
				append([]byte{131, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 16)...)), abi.TCActOK},
			{"mld done", icmp6(src, netip.MustParseAddr("ff02::2"), 132, 0, 0, make([]byte, 16)), abi.TCActOK},
			{"router advertisement", icmp6(src, dst, 134, 0, 0, make([]byte, 8)), abi.TCActShot},
			{"redirect", icmp6(src, dst, 137, 0, 0, make([]byte, 32)), abi.TCActShot},
			{"echo request", icmp6(src, dst, 128, 0, 1, nil), abi.TCActShot},
			{"solicitation in a first fragment", ipv6Frame(src, solicited, []ext6{frag6(0, true, 9)}, 58,
				append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, target[:]...)), abi.TCActShot},
			{"tcp", tcp6(ap6(src, 1), ap6(dst, 2), tcpSYN), abi.TCActShot},
		}
		for _, tc := range tests {
			t.Run(map[int]string{abi.DirFromWEP: "from ", abi.DirToWEP: "to "}[dir]+tc.name, func(t *testing.T) {
				if got := run(t, d, dir, ifA, tc.frame); got != tc.want {
					t.Fatalf("verdict %d, want %d", got, tc.want)
				}
				if got := run(t, d, dir, ifB, tc.frame); got != abi.TCActShot {
					t.Fatalf("on an interface without ifstate: %d, want drop", got)
				}
			})
		}
	}
	// The trace says why it passed (and still shows what the policy says).
	res, err := d.Trace(ifA, abi.DirToWEP, icmp6(gw, solicited, 135, 0, 0, target[:]))
	mustNil(t, err)
	if res.State.Flags&abi.StICMP6ND == 0 || res.State.Family != 6 || res.State.IcmpType != 135 {
		t.Fatalf("trace of a solicitation: %+v", res.State)
	}
}

// TestIPv6RelatedICMP: ICMPv6 errors (unreachable, packet too big, time
// exceeded, parameter problem) about a flow this interface passed pass the
// denying hook; errors about anything else do not.
func TestIPv6RelatedICMP(t *testing.T) {
	d := openTest(t, Options{})
	ifA, ifB := vethPair(t)
	allow := verdictProg(t, d, abi.VerdictAllow, 0)
	deny := verdictProg(t, d, abi.VerdictDeny, 0)
	router := netip.MustParseAddr("2001:db8::1")
	mustNil(t, d.SetIfState(ifA, 0, abi.IfReady))
	mustNil(t, d.SetIfState(ifB, 1, abi.IfReady))
	mustNil(t, d.InstallPolicy(0, abi.DirFromWEP, allow))
	mustNil(t, d.InstallPolicy(0, abi.DirToWEP, deny))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, allow))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, deny))
	outA := tcp6(ap6(ip6A, 40000), ap6(ip6B, 80), tcpSYN)
	inB := udp6(ap6(ip6A, 5555), ap6(ip6B, 53))
	if run(t, d, abi.DirFromWEP, ifA, outA) != abi.TCActOK || run(t, d, abi.DirToWEP, ifB, inB) != abi.TCActOK {
		t.Fatal("flows not allowed")
	}
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, deny))
	tests := []struct {
		name    string
		ifindex int
		frame   []byte
		want    int
	}{
		{"packet too big about A's flow", ifA, icmp6Err(router, ip6A, 2, outA), abi.TCActOK},
		{"unreachable about A's flow", ifA, icmp6Err(router, ip6A, 1, outA), abi.TCActOK},
		{"time exceeded about A's flow", ifA, icmp6Err(router, ip6A, 3, outA), abi.TCActOK},
		{"parameter problem about A's flow", ifA, icmp6Err(router, ip6A, 4, outA), abi.TCActOK},
		{"about another flow of A", ifA, icmp6Err(router, ip6A, 2, tcp6(ap6(ip6A, 40001), ap6(ip6B, 80), 0)), abi.TCActShot},
		{"about B's replies", ifB, icmp6Err(router, ip6B, 1, udp6(ap6(ip6B, 53), ap6(ip6A, 5555))), abi.TCActOK},
		{"quoting B's flow the wrong way", ifB, icmp6Err(router, ip6B, 1, inB), abi.TCActShot},
		{"about A's flow on B", ifB, icmp6Err(router, ip6B, 2, outA), abi.TCActShot},
		{"not an error type", ifA, icmp6(router, ip6A, 129, 0, 0, outA[14:14+48]), abi.TCActShot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, d, abi.DirToWEP, tc.ifindex, tc.frame); got != tc.want {
				t.Fatalf("verdict %d, want %d", got, tc.want)
			}
		})
	}
}

// TestIPv6Fragments: the later fragments of an IPv6 datagram take their
// first fragment's ports and verdict; one whose first piece was not seen
// is dropped and counted.
func TestIPv6Fragments(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, compiledPolicy(t, d, abi.DirFromWEP,
		model.Rule{Action: model.ActionAllow, Protocol: u8(17), DstPorts: []model.PortRange{{First: 53, Last: 53}}},
		model.Rule{Action: model.ActionAllow, Protocol: u8(17), NotDstPorts: []model.PortRange{{First: 1, Last: 1000}}, IPVersion: 6},
	)))
	dg := udp6Datagram(ap6(ip6A, 40000), ap6(ip6B, 53), 4000)
	if got := runAll(t, d, abi.DirFromWEP, ifA, frags6(ip6A, ip6B, 17, 0x1001, dg, 1232)); !allAre(got, abi.TCActOK) {
		t.Fatalf("allowed datagram's fragments: %v, want all pass", got)
	}
	denied := udp6Datagram(ap6(ip6A, 40000), ap6(ip6B, 54), 4000)
	if got := runAll(t, d, abi.DirFromWEP, ifA, frags6(ip6A, ip6B, 17, 0x1002, denied, 1232)); !allAre(got, abi.TCActShot) {
		t.Fatalf("denied datagram's fragments: %v, want all dropped", got)
	}
	// A later fragment alone: dropped and counted, never matched against
	// the negated port rule with missing ports.
	before := drops(t, d, DropFragNoFirst)
	later := frags6(ip6A, ip6B, 17, 0x1003, udp6Datagram(ap6(ip6A, 40000), ap6(ip6B, 54), 4000), 1232)[1:]
	if got := runAll(t, d, abi.DirFromWEP, ifA, later); !allAre(got, abi.TCActShot) {
		t.Fatalf("fragments without their first: %v, want all dropped", got)
	}
	if n := drops(t, d, DropFragNoFirst); n != before+uint64(len(later)) {
		t.Fatalf("fragment_without_first %d, want %d", n, before+uint64(len(later)))
	}
}
