package tcbpf

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

const tcActRedirect = 7

// natEnv is a client interface (ifA, workload ipA) whose both directions
// allow everything, and a service 10.96.0.10:80/tcp with id 7.
type natEnv struct {
	d        *Datapath
	ifA, ifB int
	fe       NATFrontend
}

var (
	feAddr = ap("10.96.0.10:80")
	beB    = NATBackend{Addr: netip.MustParseAddr("10.65.0.2"), Port: 8080}
	beC    = NATBackend{Addr: netip.MustParseAddr("10.65.0.3"), Port: 8080}
)

func newNATEnv(t *testing.T) *natEnv {
	t.Helper()
	d := openTest(t, Options{})
	ifA, ifB := vethPair(t)
	allow := verdictProg(t, d, abi.VerdictAllow, 0)
	for slot, ifx := range map[uint32]int{1: ifA, 2: ifB} {
		mustNil(t, d.SetIfState(ifx, slot, abi.IfReady|abi.IfWorkload))
		mustNil(t, d.InstallPolicy(slot, abi.DirFromWEP, allow))
		mustNil(t, d.InstallPolicy(slot, abi.DirToWEP, allow))
	}
	return &natEnv{d: d, ifA: ifA, ifB: ifB, fe: NATFrontend{Addr: feAddr.Addr(), Port: feAddr.Port(), Proto: 6}}
}

func (e *natEnv) from(t *testing.T, frame []byte) (int, parsed) {
	t.Helper()
	ret, out := runNAT(t, e.d.Programs().FromWEP, e.ifA, e.ifA, frame)
	if ret == abi.TCActShot {
		return ret, parsed{}
	}
	return ret, parseChecked(t, out)
}

func (e *natEnv) to(t *testing.T, ifindex, ingress int, frame []byte) (int, parsed) {
	t.Helper()
	ret, out := runNAT(t, e.d.Programs().ToWEP, ifindex, ingress, frame)
	if ret == abi.TCActShot {
		return ret, parsed{}
	}
	return ret, parseChecked(t, out)
}

func TestNATTranslatesBothWays(t *testing.T) {
	e := newNATEnv(t)
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{e.fe}, []NATBackend{beB, beC}, 0))
	client := netip.AddrPortFrom(ipA, 40000)

	ret, out := e.from(t, csumPkt(6, client, feAddr, tcpSYN, false))
	if ret != abi.TCActOK {
		t.Fatalf("SYN to frontend: verdict %d", ret)
	}
	if out.src != client || (out.dst.Addr() != beB.Addr && out.dst.Addr() != beC.Addr) || out.dst.Port() != 8080 {
		t.Fatalf("SYN translated to %s, want %s -> a backend:8080", out, client)
	}
	backend := out.dst
	// Every later packet of the connection keeps its backend.
	for range 20 {
		if _, again := e.from(t, csumPkt(6, client, feAddr, tcpACK, false)); again.dst != backend {
			t.Fatalf("connection moved from %s to %s", backend, again.dst)
		}
	}
	// The reply gets the frontend back as its source.
	ret, rep := e.to(t, e.ifA, e.ifB, csumPkt(6, backend, client, tcpSYN|tcpACK, false))
	if ret != abi.TCActOK || rep.src != feAddr || rep.dst != client {
		t.Fatalf("reply: verdict %d, %s; want %s -> %s", ret, rep, feAddr, client)
	}
	flows, err := e.d.NATFlows()
	mustNil(t, err)
	if len(flows) != 1 || flows[0].Src != client || flows[0].ID != 7 || flows[0].Backend.Addr != backend.Addr() {
		t.Fatalf("NAT flows %+v", flows)
	}
}

func TestNATSpreadsAndFollowsBackendChanges(t *testing.T) {
	e := newNATEnv(t)
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{e.fe}, []NATBackend{beB, beC}, 0))
	seen := map[netip.Addr]int{}
	for i := range 200 {
		client := netip.AddrPortFrom(ipA, uint16(30000+i))
		ret, out := e.from(t, csumPkt(6, client, feAddr, tcpSYN, false))
		if ret != abi.TCActOK {
			t.Fatalf("connection %d: verdict %d", i, ret)
		}
		seen[out.dst.Addr()]++
	}
	if seen[beB.Addr] == 0 || seen[beC.Addr] == 0 || len(seen) != 2 {
		t.Fatalf("200 connections spread as %v, want both backends", seen)
	}

	// beB goes away: new connections and the flows pinned to it move to beC
	// once its entries are flushed.
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{e.fe}, []NATBackend{beC}, 2))
	n, err := e.d.FlushNATFlows(NATFlowFilter{Backends: map[NATFlowBackend]bool{{ID: 7, Backend: beB}: true}})
	mustNil(t, err)
	if n != seen[beB.Addr] {
		t.Fatalf("flushed %d flows, want the %d pinned to %s", n, seen[beB.Addr], beB)
	}
	for i := range 200 {
		client := netip.AddrPortFrom(ipA, uint16(30000+i))
		if _, out := e.from(t, csumPkt(6, client, feAddr, tcpACK, false)); out.dst.Addr() != beC.Addr {
			t.Fatalf("connection %d still goes to %s", i, out.dst)
		}
	}
	if got, err := e.d.NATBackendsOf(7); err != nil || len(got) != 1 || got[0] != beC {
		t.Fatalf("backends %v %v", got, err)
	}

	// No ready backend: new connections drop; a whole service flush empties
	// its flows.
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{e.fe}, nil, 1))
	if ret, _ := e.from(t, csumPkt(6, netip.AddrPortFrom(ipA, 50000), feAddr, tcpSYN, false)); ret != abi.TCActShot {
		t.Fatalf("frontend without backends: verdict %d, want drop", ret)
	}
	n, err = e.d.FlushNATFlows(NATFlowFilter{Services: map[uint32]bool{7: true}})
	mustNil(t, err)
	if n != 200 {
		t.Fatalf("service flush removed %d flows, want 200", n)
	}
	mustNil(t, e.d.DeleteNATFrontend(e.fe))
	mustNil(t, e.d.DeleteNATPort(7, 0))
	// Without the frontend the address is just an address.
	if _, out := e.from(t, csumPkt(6, netip.AddrPortFrom(ipA, 50001), feAddr, tcpSYN, false)); out.dst != feAddr {
		t.Fatalf("removed frontend still translated to %s", out.dst)
	}
}

func TestNATUDPChecksums(t *testing.T) {
	e := newNATEnv(t)
	fe := NATFrontend{Addr: feAddr.Addr(), Port: 53, Proto: 17}
	mustNil(t, e.d.ProgramNATPort(9, []NATFrontend{fe}, []NATBackend{{Addr: beB.Addr, Port: 5353}}, 0))
	for _, none := range []bool{false, true} {
		client := netip.AddrPortFrom(ipA, 41000)
		if none {
			client = netip.AddrPortFrom(ipA, 41001)
		}
		ret, out := e.from(t, csumPkt(17, client, ap("10.96.0.10:53"), 0, none))
		if ret != abi.TCActOK || out.dst != ap("10.65.0.2:5353") {
			t.Fatalf("udp (no checksum %v): verdict %d, %s", none, ret, out)
		}
		if none && out.l4Csum != 0 {
			t.Fatalf("a UDP packet without checksum got checksum %#04x", out.l4Csum)
		}
		ret, rep := e.to(t, e.ifA, e.ifB, csumPkt(17, out.dst, client, 0, none))
		if ret != abi.TCActOK || rep.src != ap("10.96.0.10:53") {
			t.Fatalf("udp reply: verdict %d, %s", ret, rep)
		}
	}
}

// TestNATHairpin follows a workload that reaches itself through a service
// across all four hook runs.
func TestNATHairpin(t *testing.T) {
	e := newNATEnv(t)
	self := NATBackend{Addr: ipA, Port: 8080}
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{e.fe}, []NATBackend{self}, 0))
	client := netip.AddrPortFrom(ipA, 40000)
	hairpin := netip.AddrFrom4([4]byte{169, 254, 0, 253})
	selfAP := netip.AddrPortFrom(ipA, 8080)

	ret, out := e.from(t, csumPkt(6, client, feAddr, tcpSYN, false))
	if ret != tcActRedirect {
		t.Fatalf("hairpin request: verdict %d, want redirect", ret)
	}
	if out.src != netip.AddrPortFrom(hairpin, 40000) || out.dst != selfAP {
		t.Fatalf("hairpin request became %s", out)
	}
	if !bytes.Equal(out.dstMAC, macWorkload) || !bytes.Equal(out.srcMAC, macHost) {
		t.Fatalf("hairpin request MACs %x <- %x, want swapped", out.dstMAC, out.srcMAC)
	}
	// Coming back in on the interface it left: policed as from the workload.
	in := csumPkt(6, out.src, out.dst, tcpSYN, false)
	if ret, _ := e.to(t, e.ifA, e.ifA, in); ret != abi.TCActOK {
		t.Fatalf("hairpinned request into the workload: verdict %d", ret)
	}
	// The same source arriving from elsewhere is not trusted as hairpin:
	// with a denying ingress policy it drops.
	mustNil(t, e.d.InstallPolicy(1, abi.DirToWEP, verdictProg(t, e.d, abi.VerdictDeny, 0)))
	spoof := csumPkt(6, netip.AddrPortFrom(hairpin, 40001), selfAP, tcpSYN, false)
	if ret, _ := e.to(t, e.ifA, e.ifB, spoof); ret != abi.TCActShot {
		t.Fatalf("hairpin source from another interface: verdict %d, want drop", ret)
	}
	// The workload's reply to the hairpin address is turned back to itself
	// and passes as the reply of the flow just admitted.
	ret, rep := e.from(t, csumPkt(6, selfAP, netip.AddrPortFrom(hairpin, 40000), tcpSYN|tcpACK, false))
	if ret != abi.TCActOK || rep.src != selfAP || rep.dst != client {
		t.Fatalf("hairpin reply: verdict %d, %s", ret, rep)
	}
	// Routed back in, it gets the frontend as source.
	ret, fin := e.to(t, e.ifA, e.ifA, csumPkt(6, rep.src, rep.dst, tcpSYN|tcpACK, false))
	if ret != abi.TCActOK || fin.src != feAddr || fin.dst != client {
		t.Fatalf("hairpin reply into the client: verdict %d, %s", ret, fin)
	}
	// Later requests of the connection are redirected too (conntrack hit).
	if ret, _ := e.from(t, csumPkt(6, client, feAddr, tcpACK, false)); ret != tcActRedirect {
		t.Fatalf("established hairpin request: verdict %d, want redirect", ret)
	}
}

// TestNATTraceSeesBackend: policy (here, the trace of it) sees the
// post-DNAT destination and the route class of the backend, and a trace
// writes no NAT flow.
func TestNATTraceSeesBackend(t *testing.T) {
	e := newNATEnv(t)
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{e.fe}, []NATBackend{beB}, 0))
	pool := netip.MustParsePrefix("10.65.0.0/16")
	mustNil(t, e.d.SetRoute(pool, RouteInfo{Flags: abi.RTInPool | abi.RTLocalWorkload, PoolType: 1}))
	res, err := e.d.Trace(e.ifA, abi.DirFromWEP, csumPkt(6, netip.AddrPortFrom(ipA, 40000), feAddr, tcpSYN, false))
	mustNil(t, err)
	st := res.State
	b4 := beB.Addr.As4()
	if !res.Reached || !bytes.Equal(st.Daddr[:4], b4[:]) || st.Dport != 8080 {
		t.Fatalf("policy saw %v:%d, want %s", st.Daddr[:4], st.Dport, beB)
	}
	f4 := feAddr.Addr().As4()
	if st.Flags&abi.StNAT == 0 || !bytes.Equal(st.NatAddr[:4], f4[:]) || st.NatPort != 80 || st.NatSvc != 7 {
		t.Fatalf("trace NAT facts: flags %#x addr %v port %d svc %d", st.Flags, st.NatAddr[:4], st.NatPort, st.NatSvc)
	}
	if st.DstRoute != abi.RTInPool|abi.RTLocalWorkload {
		t.Fatalf("dst route flags %#x", st.DstRoute)
	}
	if flows, _ := e.d.NATFlows(); len(flows) != 0 {
		t.Fatalf("trace wrote NAT flows %+v", flows)
	}
	routes, err := e.d.Routes()
	mustNil(t, err)
	if info, ok := routes[pool]; !ok || info.PoolType != 1 {
		t.Fatalf("routes %v", routes)
	}
	mustNil(t, e.d.DeleteRoute(pool))
	if _, ok, _ := e.d.LookupRoute(beB.Addr); ok {
		t.Fatal("route still found after delete")
	}
}

// TestNATFrontendFilter: the address filter has a frontend's bit set while
// any frontend on that address exists, and is rebuilt by a new Datapath
// on the same pins (a restart).
func TestNATFrontendFilter(t *testing.T) {
	e := newNATEnv(t)
	f80 := e.fe
	f81 := NATFrontend{Addr: f80.Addr, Port: 81, Proto: 6}
	bit := abi.NATFEBit(f80.Addr.As4())
	isSet := func(d *Datapath) bool {
		t.Helper()
		var v bpf.DpdDpdNatFeBits
		mustNil(t, d.objs.DpdNatFeBits.Lookup(uint32(0), &v))
		return v.Bits[bit/64]&(1<<(bit%64)) != 0
	}
	if isSet(e.d) {
		t.Fatal("bit set before any frontend")
	}
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{f80, f81}, []NATBackend{beB}, 0))
	if !isSet(e.d) {
		t.Fatal("bit clear with two frontends on the address")
	}
	mustNil(t, e.d.DeleteNATFrontend(f80))
	if !isSet(e.d) {
		t.Fatal("bit cleared while port 81 still uses the address")
	}
	// A restart on the same pins, with the filter lost, rebuilds it.
	mustNil(t, e.d.objs.DpdNatFeBits.Update(uint32(0), &bpf.DpdDpdNatFeBits{}, ebpf.UpdateAny))
	d2, err := Open(Options{PinDir: e.d.PinDir(), Sizes: e.d.Sizes()})
	mustNil(t, err)
	t.Cleanup(func() { _ = d2.Close() })
	mustNil(t, d2.DeleteNATFrontend(f80)) // absent: only loads the filter
	if !isSet(d2) {
		t.Fatal("filter not rebuilt from the frontends after a restart")
	}
	mustNil(t, d2.DeleteNATFrontend(f81))
	if isSet(d2) {
		t.Fatal("bit still set without frontends")
	}
}
