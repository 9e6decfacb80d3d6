package tcbpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// The host entry programs on IPv6: the node's address on a host
// interface, a peer on its link and one elsewhere.
var (
	hostIP6  = netip.MustParseAddr("fd00:66::1")
	peerIP6  = netip.MustParseAddr("fd00:66::2")
	adminIP6 = netip.MustParseAddr("fd00:66::99")
)

// hostIface6 is a veth whose first end carries hostIP6, as a node's eth0
// would: the host entry programs' FIB lookup then finds packets to hostIP6
// are the host's own, whether or not the namespace forwards IPv6.
func hostIface6(t *testing.T) int {
	t.Helper()
	a, b := vethPair(t)
	for _, i := range []int{a, b} {
		l, err := netlink.LinkByIndex(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", l.Attrs().Name, err)
		}
	}
	la, err := netlink.LinkByIndex(a)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := netlink.ParseAddr(hostIP6.String() + "/64")
	if err != nil {
		t.Fatal(err)
	}
	addr.Flags = unix.IFA_F_NODAD
	if err := netlink.AddrAdd(la, addr); err != nil {
		testutil.CannotRun(t, "IPv6 host endpoint test", "cannot add an IPv6 address: "+err.Error())
	}
	testutil.WaitFor(t, 5*time.Second, "the local route of "+hostIP6.String(), func() bool {
		rs, err := netlink.RouteGet(hostIP6.AsSlice())
		return err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL
	})
	return a
}

// runHost runs the host entry program of dir (abi.DirToWEP: dpd_hep_in)
// over frame as if it crossed ifindex.
func runHost(t *testing.T, d *Datapath, dir, ifindex int, frame []byte) int {
	t.Helper()
	prog := d.objs.DpdHepOut
	if dir == abi.DirToWEP {
		prog = d.objs.DpdHepIn
	}
	ret, err := runOn(prog, ifindex, 0, frame, 1)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return int(int32(ret))
}

// stagePolicy compiles rules into one tier whose default is Pass, as a
// host endpoint's untracked and pre-DNAT tiers are: no match goes on.
func stagePolicy(t *testing.T, d *Datapath, dir int, rules ...model.Rule) *ebpf.Program {
	t.Helper()
	return tierProgram(t, d, dir, model.Tier{Name: "stage", DefaultAction: model.ActionPass,
		Policies: []model.PolicyRules{{Name: "stage/p", Kind: "policy", Rules: rules}}})
}

type hostCase struct {
	name  string
	dir   int
	frame []byte
	want  int
}

func runHostCases(t *testing.T, d *Datapath, ifindex int, cases []hostCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(map[int]string{abi.DirFromWEP: "out ", abi.DirToWEP: "in "}[tc.dir]+tc.name, func(t *testing.T) {
			if got := runHost(t, d, tc.dir, ifindex, tc.frame); got != tc.want {
				t.Fatalf("verdict %d, want %d", got, tc.want)
			}
		})
	}
}

// TestHostIPv6Policy: a host endpoint polices the node's own IPv6 traffic
// with its compiled policy (rule families as on workloads), replies and
// related ICMPv6 errors pass by conntrack, failsafe ports pass (by peer
// net where the entry names one) and are tracked, and neighbour
// discovery, router advertisements and MLD pass a deny-all policy.
func TestHostIPv6Policy(t *testing.T) {
	d := openTest(t, Options{})
	eth := hostIface6(t)
	tcp, udp := u8(6), u8(17)
	mustNil(t, d.SetIfState(eth, 1, abi.IfReady|abi.IfHost))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, compiledPolicy(t, d, abi.DirToWEP,
		model.Rule{Action: model.ActionAllow, Protocol: tcp, SrcNets: []netip.Prefix{netip.MustParsePrefix("fd00:66::/64")},
			DstPorts: []model.PortRange{{First: 8080, Last: 8080}}},
		model.Rule{Action: model.ActionAllow, IPVersion: 4, Protocol: tcp, DstPorts: []model.PortRange{{First: 9090, Last: 9090}}},
		model.Rule{Action: model.ActionDeny, Protocol: tcp, DstPorts: []model.PortRange{{First: 22, Last: 22}}},
	)))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, compiledPolicy(t, d, abi.DirFromWEP,
		model.Rule{Action: model.ActionAllow, Protocol: udp, DstPorts: []model.PortRange{{First: 5353, Last: 5353}}},
	)))
	mustNil(t, d.SetFailsafes([]Failsafe{
		{Inbound: true, Proto: 6, Port: 22, Net: netip.MustParsePrefix("::/0")},
		{Inbound: true, Proto: 6, Port: 2379, Net: netip.PrefixFrom(adminIP6, 128)},
		{Proto: 17, Port: 53, Net: netip.MustParsePrefix("::/0")},
		{Inbound: true, Proto: 6, Port: 6443, Net: netip.MustParsePrefix("0.0.0.0/0")}, // IPv4 only
	}))
	peer, host := ap6(peerIP6, 40000), func(port uint16) netip.AddrPort { return ap6(hostIP6, port) }
	out := udp6(ap6(hostIP6, 40001), ap6(peerIP6, 5353))
	deny, pass := abi.TCActShot, abi.TCActOK

	ll, gw := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
	solicited := netip.MustParseAddr("ff02::1:ff00:1")
	target := hostIP6.As16()
	hop := ext6{typ: 0, body: []byte{5, 2, 0, 0, 1, 0}} // router alert
	var nd []hostCase
	for _, dir := range []int{abi.DirToWEP, abi.DirFromWEP} {
		src, dst := gw, ll
		if dir == abi.DirFromWEP {
			src, dst = ll, gw
		}
		nd = append(nd,
			hostCase{"neighbour solicitation", dir, icmp6(src, solicited, 135, 0, 0, target[:]), pass},
			hostCase{"neighbour advertisement", dir, icmp6(src, dst, 136, 0, 0, target[:]), pass},
			hostCase{"router solicitation", dir, icmp6(src, netip.MustParseAddr("ff02::2"), 133, 0, 0, nil), pass},
			hostCase{"router advertisement", dir, icmp6(src, netip.MustParseAddr("ff02::1"), 134, 0, 0, make([]byte, 8)), pass},
			hostCase{"mld query", dir, icmp6(src, netip.MustParseAddr("ff02::1"), 130, 0, 0, make([]byte, 16)), pass},
			hostCase{"mldv2 report after hop-by-hop", dir, ipv6Frame(src, netip.MustParseAddr("ff02::16"), []ext6{hop}, 58,
				append([]byte{143, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 16)...)), pass},
			hostCase{"redirect", dir, icmp6(src, dst, 137, 0, 0, make([]byte, 32)), deny},
			hostCase{"solicitation in a first fragment", dir, ipv6Frame(src, solicited, []ext6{frag6(0, true, 9)}, 58,
				append([]byte{135, 0, 0, 0, 0, 0, 0, 0}, target[:]...)), deny},
		)
	}

	runHostCases(t, d, eth, append([]hostCase{
		{"allowed by the v6 rule", abi.DirToWEP, tcp6(peer, host(8080), tcpSYN), pass},
		{"its reply by conntrack", abi.DirFromWEP, tcp6(host(8080), peer, tcpSYN|tcpACK), pass},
		{"the v6 rule's net only", abi.DirToWEP, tcp6(ap6(netip.MustParseAddr("fd00:67::2"), 40000), host(8080), tcpSYN), deny},
		{"no rule", abi.DirToWEP, tcp6(peer, host(8081), tcpSYN), deny},
		{"an IPv4-only rule", abi.DirToWEP, tcp6(peer, host(9090), tcpSYN), deny},
		{"ping", abi.DirToWEP, icmp6(peerIP6, hostIP6, 128, 0, 7, nil), deny},
		{"a reply never sent for", abi.DirFromWEP, tcp6(host(8081), peer, tcpSYN|tcpACK), deny},
		{"failsafe beats a deny rule", abi.DirToWEP, tcp6(peer, host(22), tcpSYN), pass},
		{"failsafe reply", abi.DirFromWEP, tcp6(host(22), peer, tcpSYN|tcpACK), pass},
		{"failsafe of one peer net", abi.DirToWEP, tcp6(ap6(adminIP6, 40000), host(2379), tcpSYN), pass},
		{"failsafe of one peer net, other peer", abi.DirToWEP, tcp6(peer, host(2379), tcpSYN), deny},
		{"an IPv4 failsafe", abi.DirToWEP, tcp6(peer, host(6443), tcpSYN), deny},
		{"outbound failsafe", abi.DirFromWEP, udp6(ap6(hostIP6, 40002), ap6(peerIP6, 53)), pass},
		{"outbound failsafe reply", abi.DirToWEP, udp6(ap6(peerIP6, 53), ap6(hostIP6, 40002)), pass},
		{"outbound failsafe port, inbound", abi.DirToWEP, udp6(peer, ap6(hostIP6, 53)), deny},
		{"allowed out", abi.DirFromWEP, out, pass},
		{"its reply", abi.DirToWEP, udp6(ap6(peerIP6, 5353), ap6(hostIP6, 40001)), pass},
		{"packet too big about it", abi.DirToWEP, icmp6Err(peerIP6, hostIP6, 2, out), pass},
		{"denied out", abi.DirFromWEP, udp6(ap6(hostIP6, 40003), ap6(peerIP6, 5354)), deny},
	}, nd...))

	// The failsafe flow is tracked as one, the allowed one as usual.
	key, _ := CTFlowKey(netip.AddrPortFrom(peerIP6, 40000), netip.AddrPortFrom(hostIP6, 22), 6, abi.DirToWEP, uint32(eth))
	var v ctVal
	if err := d.Maps().Conntrack.Lookup(&key, &v); err != nil || v.Flags&abi.CTFFailsafe == 0 {
		t.Fatalf("failsafe flow's entry %+v (%v), want the failsafe flag", v, err)
	}
	key, _ = CTFlowKey(netip.AddrPortFrom(peerIP6, 40000), netip.AddrPortFrom(hostIP6, 8080), 6, abi.DirToWEP, uint32(eth))
	if err := d.Maps().Conntrack.Lookup(&key, &v); err != nil || v.Flags&abi.CTFFailsafe != 0 {
		t.Fatalf("allowed flow's entry %+v (%v)", v, err)
	}
}

// TestHostIPv6Stages: IPv6 takes the stages in IPv4's order: untracked
// policy first (what it allows leaves no conntrack entry), then
// conntrack, then pre-DNAT policy (a deny there beats the normal allow),
// then the normal policy; failsafes skip the stages.
func TestHostIPv6Stages(t *testing.T) {
	d := openTest(t, Options{})
	eth := hostIface6(t)
	tcp := u8(6)
	const normal, untracked, prednat = 1, 2, 3
	mustNil(t, d.SetIfState(eth, normal, abi.IfReady|abi.IfHost))
	mustNil(t, d.InstallPolicy(normal, abi.DirToWEP, compiledPolicy(t, d, abi.DirToWEP,
		model.Rule{Action: model.ActionAllow, Protocol: tcp, DstPorts: []model.PortRange{{First: 9090, Last: 9091}}})))
	mustNil(t, d.InstallPolicy(normal, abi.DirFromWEP, compiledPolicy(t, d, abi.DirFromWEP)))
	mustNil(t, d.InstallPolicy(untracked, abi.DirToWEP, stagePolicy(t, d, abi.DirToWEP,
		model.Rule{Action: model.ActionAllow, Protocol: tcp, DstPorts: []model.PortRange{{First: 8080, Last: 8080}}},
		model.Rule{Action: model.ActionDeny, Protocol: tcp, DstPorts: []model.PortRange{{First: 7070, Last: 7070}}})))
	mustNil(t, d.InstallPolicy(untracked, abi.DirFromWEP, stagePolicy(t, d, abi.DirFromWEP,
		model.Rule{Action: model.ActionAllow, Protocol: tcp, SrcPorts: []model.PortRange{{First: 8080, Last: 8080}}})))
	mustNil(t, d.InstallPolicy(prednat, abi.DirToWEP, stagePolicy(t, d, abi.DirToWEP,
		model.Rule{Action: model.ActionDeny, Protocol: tcp, DstPorts: []model.PortRange{{First: 9091, Last: 9091}}})))
	mustNil(t, d.SetHepStages(eth, HepStages{Untracked: untracked + 1, PreDNAT: prednat + 1}))
	mustNil(t, d.SetFailsafes([]Failsafe{{Inbound: true, Proto: 6, Port: 7070, Net: netip.MustParsePrefix("::/0")}}))
	peer, host := ap6(peerIP6, 40000), func(port uint16) netip.AddrPort { return ap6(hostIP6, port) }
	deny, pass := abi.TCActShot, abi.TCActOK
	runHostCases(t, d, eth, []hostCase{
		{"untracked allow", abi.DirToWEP, tcp6(peer, host(8080), tcpSYN), pass},
		{"untracked allow of the reply", abi.DirFromWEP, tcp6(host(8080), peer, tcpSYN|tcpACK), pass},
		{"pre-DNAT deny beats the normal allow", abi.DirToWEP, tcp6(peer, host(9091), tcpSYN), deny},
		{"no stage matches: the normal allow", abi.DirToWEP, tcp6(peer, host(9090), tcpSYN), pass},
		{"its reply by conntrack", abi.DirFromWEP, tcp6(host(9090), peer, tcpSYN|tcpACK), pass},
		{"failsafe beats the untracked deny", abi.DirToWEP, tcp6(peer, host(7070), tcpSYN), pass},
		{"failsafe reply skips the untracked policy", abi.DirFromWEP, tcp6(host(7070), peer, tcpSYN|tcpACK), pass},
		{"no stage and no rule", abi.DirToWEP, tcp6(peer, host(6060), tcpSYN), deny},
	})
	ports := map[uint16]bool{}
	var k ctKey
	var v ctVal
	it := d.Maps().Conntrack.Iterate()
	for it.Next(&k, &v) {
		if k.Family == abi.CTFamilyV6 {
			ports[FlowOf(&k, &v).Dport] = true
		}
	}
	mustNil(t, it.Err())
	if ports[8080] || !ports[9090] || !ports[7070] || ports[9091] {
		t.Fatalf("IPv6 conntrack entries by destination port %v: want 9090 and 7070 only", ports)
	}
}

// The host entry programs stay within the verifier's budget with both
// families, as the workload ones do (TestEntryVerifierBudget).
func TestHostVerifierBudget(t *testing.T) {
	d := openTest(t, Options{})
	for name, p := range map[string]*ebpf.Program{
		abi.ProgHepIn: d.objs.DpdHepIn, abi.ProgHepOut: d.objs.DpdHepOut,
		"dpd_hep_in_cont": d.objs.DpdHepInCont, "dpd_hep_out_cont": d.objs.DpdHepOutCont,
	} {
		n, ok, err := verified(p)()
		mustNil(t, err)
		if !ok {
			testutil.CannotRun(t, "verifier budget test", "the kernel does not report verified instructions")
		}
		t.Logf("%s: %d instructions verified", name, n)
		if n > entryVerifierBudget {
			t.Errorf("%s: the verifier processed %d instructions, over the budget of %d", name, n, entryVerifierBudget)
		}
	}
}

// TestHostTraceIPv6: a trace through the host entry programs writes
// nothing and says what decided: the normal policy, an untracked stage, a
// failsafe port or the ND exemption (with what the policy would say), no
// policy, or an interface not policed at all.
func TestHostTraceIPv6(t *testing.T) {
	d := openTest(t, Options{})
	eth := hostIface6(t)
	tcp := u8(6)
	const normal, untracked = 1, 2
	mustNil(t, d.SetIfState(eth, normal, abi.IfReady|abi.IfHost))
	mustNil(t, d.InstallPolicy(normal, abi.DirToWEP, compiledPolicy(t, d, abi.DirToWEP,
		model.Rule{Action: model.ActionAllow, Protocol: tcp, DstPorts: []model.PortRange{{First: 8080, Last: 8080}}})))
	mustNil(t, d.InstallPolicy(untracked, abi.DirToWEP, stagePolicy(t, d, abi.DirToWEP,
		model.Rule{Action: model.ActionDeny, Protocol: tcp, DstPorts: []model.PortRange{{First: 7070, Last: 7070}}})))
	mustNil(t, d.SetHepStages(eth, HepStages{Untracked: untracked + 1}))
	mustNil(t, d.SetFailsafes([]Failsafe{{Inbound: true, Proto: 6, Port: 7070, Net: netip.MustParsePrefix("fd00:66::/64")}}))
	peer, host := ap6(peerIP6, 40000), func(port uint16) netip.AddrPort { return ap6(hostIP6, port) }
	target := hostIP6.As16()
	tests := []struct {
		name     string
		ifindex  int
		dir      int
		frame    []byte
		reached  bool
		verdict  uint32
		flags    uint32 // all must be set
		notFlags uint32
	}{
		{"normal allow", eth, abi.DirToWEP, tcp6(peer, host(8080), tcpSYN), true, abi.VerdictAllow, abi.StEpilogue, abi.StFailsafe},
		{"normal deny", eth, abi.DirToWEP, tcp6(peer, host(8081), tcpSYN), true, abi.VerdictDeny, abi.StEpilogue, 0},
		{"untracked deny", eth, abi.DirToWEP, tcp6(ap6(netip.MustParseAddr("fd00:67::2"), 40000), host(7070), tcpSYN), true,
			abi.VerdictDeny, abi.StEpilogue | abi.StHepUntracked, abi.StFailsafe},
		{"failsafe, the policy would deny", eth, abi.DirToWEP, tcp6(peer, host(7070), tcpSYN), true,
			abi.VerdictDeny, abi.StEpilogue | abi.StFailsafe, abi.StHepUntracked},
		{"neighbour solicitation", eth, abi.DirToWEP, icmp6(netip.MustParseAddr("fe80::2"), netip.MustParseAddr("ff02::1:ff00:1"), 135, 0, 0, target[:]),
			true, abi.VerdictDeny, abi.StEpilogue | abi.StICMP6ND, 0},
		{"no egress policy", eth, abi.DirFromWEP, tcp6(host(8080), peer, tcpSYN), true, 0, abi.StNoPolicy, abi.StEpilogue},
		{"unpoliced interface", 1, abi.DirToWEP, tcp6(peer, host(8080), tcpSYN), false, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := d.TraceHost(tc.ifindex, tc.dir, tc.frame)
			mustNil(t, err)
			st := res.State
			if res.Reached != tc.reached || (tc.reached && (st.Verdict != tc.verdict || st.Family != 6 ||
				st.Flags&tc.flags != tc.flags || st.Flags&tc.notFlags != 0)) {
				t.Fatalf("trace %+v (reached %v), want verdict %d, flags %#x set and %#x clear", st, res.Reached, tc.verdict, tc.flags, tc.notFlags)
			}
		})
	}
	var k ctKey
	var v ctVal
	n := 0
	it := d.Maps().Conntrack.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	mustNil(t, it.Err())
	if n != 0 {
		t.Fatalf("conntrack after traces: %d entries, want none", n)
	}
}
