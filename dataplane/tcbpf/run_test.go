package tcbpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// run runs the entry program of dir over frame as if it arrived on ifindex.
func run(t *testing.T, d *Datapath, dir, ifindex int, frame []byte) int {
	t.Helper()
	prog, err := d.entryProgram(dir)
	if err != nil {
		t.Fatal(err)
	}
	ret, err := runOn(prog, ifindex, 0, frame, 1)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return int(int32(ret))
}

func TestEntryVerdicts(t *testing.T) {
	d := openTest(t, Options{})
	ifA, ifB := vethPair(t)
	allow := verdictProg(t, d, abi.VerdictAllow, 0)
	deny := verdictProg(t, d, abi.VerdictDeny, 0)
	none := verdictProg(t, d, abi.VerdictNone, 0)
	// Slot 1 (ifA) allows egress, slot 2 (ifB) denies egress, slot 3 (ifB
	// readied below) has a policy that decides nothing.
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, allow))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, deny))
	mustNil(t, d.InstallPolicy(2, abi.DirFromWEP, deny))
	mustNil(t, d.InstallPolicy(3, abi.DirFromWEP, none))

	tests := []struct {
		name     string
		setup    func()
		dir, if_ int
		frame    []byte
		want     int
	}{
		{"arp passes even unprogrammed", nil, abi.DirFromWEP, ifB, arpPkt(), abi.TCActOK},
		{"malformed ipv6 dropped", nil, abi.DirFromWEP, ifA, ipv6Pkt(), abi.TCActShot},
		{"unknown ethertype dropped", nil, abi.DirFromWEP, ifA, ether(0x88cc, make([]byte, 46)), abi.TCActShot},
		{"no ifstate dropped", nil, abi.DirFromWEP, ifB, udpPkt(ipB, ipA, 1, 2), abi.TCActShot},
		{"ifstate not ready dropped", func() { mustNil(t, d.SetIfState(ifB, 2, abi.IfWorkload)) },
			abi.DirFromWEP, ifB, udpPkt(ipB, ipA, 1, 2), abi.TCActShot},
		{"allow policy passes", nil, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 1000, 53), abi.TCActOK},
		{"deny policy drops", func() { mustNil(t, d.SetIfState(ifB, 2, abi.IfReady)) },
			abi.DirFromWEP, ifB, udpPkt(ipB, ipA, 1000, 53), abi.TCActShot},
		{"no policy installed drops", nil, abi.DirToWEP, ifB, udpPkt(ipA, ipB, 1000, 53), abi.TCActShot},
		{"verdict none drops", func() { mustNil(t, d.SetIfState(ifB, 3, abi.IfReady)) },
			abi.DirFromWEP, ifB, udpPkt(ipB, ipA, 1000, 53), abi.TCActShot},
		{"truncated tcp dropped", nil, abi.DirFromWEP, ifA, ipv4(ipA, ipB, 6, make([]byte, 10)), abi.TCActShot},
		{"bad ip version dropped", nil, abi.DirFromWEP, ifA, ether(ethIPv4, append([]byte{0x65}, make([]byte, 39)...)), abi.TCActShot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			if got := run(t, d, tc.dir, tc.if_, tc.frame); got != tc.want {
				t.Fatalf("verdict %d, want %d", got, tc.want)
			}
		})
	}
}

func TestConntrack(t *testing.T) {
	d := openTest(t, Options{})
	ifA, ifB := vethPair(t)
	allow := verdictProg(t, d, abi.VerdictAllow, 0)
	deny := verdictProg(t, d, abi.VerdictDeny, 0)
	// A may send anything but accepts nothing; B accepts nothing either.
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady))
	mustNil(t, d.SetIfState(ifB, 2, abi.IfReady))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, allow))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, deny))
	mustNil(t, d.InstallPolicy(2, abi.DirFromWEP, deny))
	mustNil(t, d.InstallPolicy(2, abi.DirToWEP, deny))

	out := tcpPkt(ipA, ipB, 40000, 80, tcpSYN)
	reply := tcpPkt(ipB, ipA, 80, 40000, tcpSYN|tcpACK)
	if got := run(t, d, abi.DirToWEP, ifA, reply); got != abi.TCActShot {
		t.Fatalf("reply before the flow exists: %d, want drop", got)
	}
	if got := run(t, d, abi.DirFromWEP, ifA, out); got != abi.TCActOK {
		t.Fatalf("allowed egress: %d", got)
	}
	var v ctVal
	key, _ := CTFlowKey(netip.AddrPortFrom(ipA, 40000), netip.AddrPortFrom(ipB, 80), 6, abi.DirFromWEP, uint32(ifA))
	if err := d.Maps().Conntrack.Lookup(&key, &v); err != nil {
		t.Fatalf("no conntrack entry after allow: %v", err)
	}
	if v.Created == 0 || v.LastSeen < v.Created || v.Flags != 0 {
		t.Fatalf("bad entry %+v", v)
	}
	if got := run(t, d, abi.DirToWEP, ifA, reply); got != abi.TCActOK {
		t.Fatalf("reply of allowed flow on denying ingress: %d, want pass", got)
	}
	if err := d.Maps().Conntrack.Lookup(&key, &v); err != nil || v.Flags&abi.CTFEstablished == 0 {
		t.Fatalf("reply with ACK did not mark established: %+v %v", v, err)
	}
	// A's egress allow must not let the packet skip B's ingress policy.
	if got := run(t, d, abi.DirToWEP, ifB, out); got != abi.TCActShot {
		t.Fatalf("same flow at B's ingress: %d, want drop", got)
	}
	// Same tuple at the same hook of another interface is a new flow.
	if got := run(t, d, abi.DirFromWEP, ifB, out); got != abi.TCActShot {
		t.Fatalf("same flow on another interface: %d, want drop", got)
	}
	// With the policy gone, the established flow still passes (conntrack
	// hit), a new one does not.
	mustNil(t, d.ClearPolicy(1, abi.DirFromWEP))
	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40000, 80, tcpACK)); got != abi.TCActOK {
		t.Fatalf("established flow without policy: %d, want pass", got)
	}
	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40001, 80, tcpSYN)); got != abi.TCActShot {
		t.Fatalf("new flow without policy: %d, want drop", got)
	}
	// FIN moves the flow to the short timeout.
	run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40000, 80, tcpFIN|tcpACK))
	if err := d.Maps().Conntrack.Lookup(&key, &v); err != nil || v.Flags&abi.CTFClosing == 0 {
		t.Fatalf("FIN did not mark closing: %+v %v", v, err)
	}
	// Scanning now keeps it, scanning past the timeout expires it.
	if n, err := d.ScanConntrack(time.Now()); err != nil || n != 0 {
		t.Fatalf("scan now: %d %v", n, err)
	}
	if n, err := d.ScanConntrack(time.Now().Add(CTTimeout(6, v.Flags) + time.Second)); err != nil || n != 1 {
		t.Fatalf("scan past timeout: %d %v, want 1 expired", n, err)
	}
	if n, _ := d.CountConntrack(); n != 0 {
		t.Fatalf("%d entries left", n)
	}
}

func TestConntrackICMPAndUDP(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 0, abi.IfReady))
	mustNil(t, d.InstallPolicy(0, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0)))
	mustNil(t, d.InstallPolicy(0, abi.DirToWEP, verdictProg(t, d, abi.VerdictDeny, 0)))
	tests := []struct {
		name       string
		out, reply []byte
		stranger   []byte // a packet that looks similar but is not a reply
	}{
		{"icmp echo", icmpEcho(ipA, ipB, 8, 77), icmpEcho(ipB, ipA, 0, 77), icmpEcho(ipB, ipA, 0, 78)},
		{"udp", udpPkt(ipA, ipB, 5000, 53), udpPkt(ipB, ipA, 53, 5000), udpPkt(ipB, ipA, 53, 5001)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, d, abi.DirFromWEP, ifA, tc.out); got != abi.TCActOK {
				t.Fatalf("out: %d", got)
			}
			if got := run(t, d, abi.DirToWEP, ifA, tc.reply); got != abi.TCActOK {
				t.Fatalf("reply: %d, want pass", got)
			}
			if got := run(t, d, abi.DirToWEP, ifA, tc.stranger); got != abi.TCActShot {
				t.Fatalf("stranger: %d, want drop", got)
			}
		})
	}
}

func TestRuleCounters(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 0, abi.IfReady))
	mustNil(t, d.InstallPolicy(0, abi.DirFromWEP, verdictProg(t, d, abi.VerdictDeny, 42)))
	mustNil(t, d.InstallPolicy(0, abi.DirToWEP, verdictProg(t, d, abi.VerdictAllow, 43)))
	mustNil(t, d.EnsureCounters([]uint64{42}))
	pkt := udpPkt(ipA, ipB, 1, 2)
	for range 3 {
		run(t, d, abi.DirFromWEP, ifA, pkt)
	}
	// 43 has no counter entry: counted nowhere, no error.
	run(t, d, abi.DirToWEP, ifA, udpPkt(ipB, ipA, 9, 9))
	p, b, err := d.ReadCounter(42)
	if err != nil || p != 3 || b != uint64(3*len(pkt)) {
		t.Fatalf("counter 42: %d packets %d bytes %v; want 3, %d", p, b, err, 3*len(pkt))
	}
	if _, _, err := d.ReadCounter(43); err == nil {
		t.Fatal("counter 43 exists without EnsureCounters")
	}
	// Ensure again keeps counts; delete removes.
	mustNil(t, d.EnsureCounters([]uint64{42, 0}))
	if p, _, _ := d.ReadCounter(42); p != 3 {
		t.Fatalf("EnsureCounters reset the counter to %d", p)
	}
	mustNil(t, d.DeleteCounters([]uint64{42, 99}))
	if _, _, err := d.ReadCounter(42); err == nil {
		t.Fatal("counter 42 still there")
	}
}

func TestTraceWritesNothing(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 0, abi.IfReady))
	mustNil(t, d.InstallPolicy(0, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 7)))
	mustNil(t, d.EnsureCounters([]uint64{7}))
	pkt := tcpPkt(ipA, ipB, 1234, 443, tcpSYN)

	res, err := d.Trace(ifA, abi.DirFromWEP, pkt)
	if err != nil {
		t.Fatal(err)
	}
	st := res.State
	if res.Ret != abi.TCActOK || !res.Reached || st.Verdict != abi.VerdictAllow || st.RuleId != 7 ||
		st.Flags&abi.StEpilogue == 0 || st.Flags&abi.StTCPSyn == 0 || st.Dport != 443 || st.Sport != 1234 ||
		st.Proto != 6 || st.Family != 4 || st.Ifindex != uint32(ifA) || st.Trace == 0 {
		t.Fatalf("trace result %+v", res)
	}
	if n, _ := d.CountConntrack(); n != 0 {
		t.Fatalf("trace created %d conntrack entries", n)
	}
	if p, _, _ := d.ReadCounter(7); p != 0 {
		t.Fatalf("trace counted %d packets", p)
	}
	// After a real packet, a trace still runs the policy and reports the hit.
	run(t, d, abi.DirFromWEP, ifA, pkt)
	res, err = d.Trace(ifA, abi.DirFromWEP, pkt)
	if err != nil || res.State.Flags&abi.StCTFwd == 0 || res.State.Flags&abi.StEpilogue == 0 {
		t.Fatalf("trace of an established flow: %+v %v", res, err)
	}
	// No policy: the trace says so; not ready: nothing reached.
	res, err = d.Trace(ifA, abi.DirToWEP, udpPkt(ipB, ipA, 1, 2))
	if err != nil || res.Ret != abi.TCActShot || res.State.Flags&abi.StNoPolicy == 0 {
		t.Fatalf("trace without policy: %+v %v", res, err)
	}
	mustNil(t, d.DeleteIfState(ifA))
	res, err = d.Trace(ifA, abi.DirFromWEP, pkt)
	if err != nil || res.Ret != abi.TCActShot || res.Reached {
		t.Fatalf("trace without ifstate: %+v %v", res, err)
	}
}

func mustNil(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestConntrackRelatedICMP(t *testing.T) {
	d := openTest(t, Options{})
	ifA, ifB := vethPair(t)
	allow := verdictProg(t, d, abi.VerdictAllow, 0)
	deny := verdictProg(t, d, abi.VerdictDeny, 0)
	router := netip.MustParseAddr("192.0.2.1")
	mustNil(t, d.SetIfState(ifA, 0, abi.IfReady))
	mustNil(t, d.SetIfState(ifB, 1, abi.IfReady))
	mustNil(t, d.InstallPolicy(0, abi.DirFromWEP, allow))
	mustNil(t, d.InstallPolicy(0, abi.DirToWEP, deny))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, allow))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, deny))

	// A opened a flow; B accepted one, and then its ingress turned to deny.
	outA := tcpPkt(ipA, ipB, 40000, 80, tcpSYN)
	inB := tcpPkt(ipA, ipB, 5555, 22, tcpSYN)
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
		{"error about A's flow", ifA, icmpErr(router, ipA, outA), abi.TCActOK},
		{"error about another flow of A", ifA, icmpErr(router, ipA, tcpPkt(ipA, ipB, 40001, 80, 0)), abi.TCActShot},
		{"error about B's replies", ifB, icmpErr(router, ipB, tcpPkt(ipB, ipA, 22, 5555, tcpACK)), abi.TCActOK},
		{"error quoting B's accepted flow the wrong way", ifB, icmpErr(router, ipB, inB), abi.TCActShot},
		{"error about A's flow on B", ifB, icmpErr(router, ipB, outA), abi.TCActShot},
		{"quote of udp", ifA, icmpErr(router, ipA, udpPkt(ipA, ipB, 40000, 80)), abi.TCActShot},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := run(t, d, abi.DirToWEP, tc.ifindex, tc.frame); got != tc.want {
				t.Fatalf("verdict %d, want %d", got, tc.want)
			}
		})
	}
}
