package tcbpf

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// ipv4Frag is one fragment: body at byte offset 8*off8 of the datagram,
// with a valid IP checksum.
func ipv4Frag(src, dst netip.Addr, proto uint8, id, off8 uint16, more bool, body []byte) []byte {
	h := make([]byte, 20, 20+len(body))
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(body)))
	binary.BigEndian.PutUint16(h[4:], id)
	fo := off8
	if more {
		fo |= 0x2000
	}
	binary.BigEndian.PutUint16(h[6:], fo)
	h[8] = 64
	h[9] = proto
	s, d := src.As4(), dst.As4()
	copy(h[12:16], s[:])
	copy(h[16:20], d[:])
	binary.BigEndian.PutUint16(h[10:], csumFold(csumAdd(0, h)))
	return ether(ethIPv4, append(h, body...))
}

// fragments splits an L4 datagram (header included) into fragments of at
// most size bytes of it (size a multiple of 8).
func fragments(src, dst netip.Addr, proto uint8, id uint16, l4 []byte, size int) [][]byte {
	var out [][]byte
	for off := 0; off < len(l4); off += size {
		end := min(off+size, len(l4))
		out = append(out, ipv4Frag(src, dst, proto, id, uint16(off/8), end < len(l4), l4[off:end]))
	}
	return out
}

// udpDatagram is a UDP header + n payload bytes with a valid checksum.
func udpDatagram(src, dst netip.AddrPort, n int) []byte {
	l4 := make([]byte, 8+n)
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	for i := 8; i < len(l4); i++ {
		l4[i] = byte(i)
	}
	s, d := src.Addr().As4(), dst.Addr().As4()
	sum := csumAdd(csumAdd(0, s[:]), d[:]) + 17 + uint32(len(l4))
	binary.BigEndian.PutUint16(l4[6:], csumFold(csumAdd(sum, l4)))
	return l4
}

func icmpEchoBody(typ uint8, id uint16, n int) []byte {
	l4 := make([]byte, 8+n)
	l4[0] = typ
	binary.BigEndian.PutUint16(l4[4:], id)
	return l4
}

// compiledPolicy loads a real policy program for dir with one policy of
// rules (then the end-of-tier deny) and returns its head.
func compiledPolicy(t *testing.T, d *Datapath, dir int, rules ...model.Rule) *ebpf.Program {
	t.Helper()
	return tierProgram(t, d, dir, model.Tier{Name: "default", DefaultAction: model.ActionDeny,
		Policies: []model.PolicyRules{{Name: "default/frag", Kind: "policy", Rules: rules}}})
}

// tierProgram compiles and loads one tier for dir without IP sets and
// returns its head; the program closes with the test.
func tierProgram(t *testing.T, d *Datapath, dir int, tier model.Tier) *ebpf.Program {
	t.Helper()
	pol := model.DirectionPolicy{Tiers: []model.Tier{tier}}
	mdir := model.Egress
	if dir == abi.DirToWEP {
		mdir = model.Ingress
	}
	spec, err := polprog.Compile(&pol, mdir, noSets{}, polprog.Options{})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	m := d.Maps()
	prog, err := spec.Load(polprog.Maps{State: m.State, Jump: m.Jump, IPSets: m.IPSets, RuleCtrs: m.RuleCtrs, Chain: m.Chain,
		Epilogue: d.EpilogueArray()})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { _ = prog.Close() })
	return prog.Head()
}

type noSets struct{}

func (noSets) SetID(string) (uint32, bool) { return 0, false }

func u8(v uint8) *uint8 { return &v }

func drops(t *testing.T, d *Datapath, r DropReason) uint64 {
	t.Helper()
	p, _, err := d.ReadDrops(r)
	mustNil(t, err)
	return p
}

// runAll runs every frame through dir's entry program at ifindex and
// returns the verdicts.
func runAll(t *testing.T, d *Datapath, dir, ifindex int, frames [][]byte) []int {
	t.Helper()
	out := make([]int, len(frames))
	for i, f := range frames {
		out[i] = run(t, d, dir, ifindex, f)
	}
	return out
}

func allAre(vs []int, want int) bool {
	for _, v := range vs {
		if v != want {
			return false
		}
	}
	return len(vs) > 0
}

// TestFragmentsFollowFirst: non-first fragments get the first fragment's
// ports, so a port rule decides them as it decided the first piece, a
// negated port rule never matches their missing ports, and a fragment
// whose first piece the hook did not see is dropped and counted.
func TestFragmentsFollowFirst(t *testing.T) {
	d := openTest(t, Options{})
	ifA, ifB := vethPair(t)
	udp := u8(17)
	// A may send UDP to port 53 only; B may send UDP anywhere but port 53,
	// and ICMP of any type but echo request.
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.SetIfState(ifB, 2, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, compiledPolicy(t, d, abi.DirFromWEP,
		model.Rule{Action: model.ActionAllow, Protocol: udp, DstPorts: []model.PortRange{{First: 53, Last: 53}}})))
	mustNil(t, d.InstallPolicy(2, abi.DirFromWEP, compiledPolicy(t, d, abi.DirFromWEP,
		model.Rule{Action: model.ActionAllow, Protocol: udp, NotDstPorts: []model.PortRange{{First: 53, Last: 53}}},
		model.Rule{Action: model.ActionAllow, Protocol: u8(1), NotICMP: &model.ICMPMatch{Type: 8}})))
	for _, slot := range []uint32{1, 2} {
		mustNil(t, d.InstallPolicy(slot, abi.DirToWEP, verdictProg(t, d, abi.VerdictDeny, 0)))
	}
	dg := func(src, dst netip.Addr, sport, dport uint16, id uint16) [][]byte {
		return fragments(src, dst, 17, id, udpDatagram(netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport), 3000), 1480)
	}

	t.Run("allowed first, rest pass", func(t *testing.T) {
		frs := dg(ipA, ipB, 5000, 53, 100)
		if len(frs) != 3 {
			t.Fatalf("%d fragments, want 3", len(frs))
		}
		if got := runAll(t, d, abi.DirFromWEP, ifA, frs); !allAre(got, abi.TCActOK) {
			t.Fatalf("verdicts %v, want all pass", got)
		}
		var v bpf.DpdDpdFragVal
		k := bpf.DpdDpdFragKey{Id: uint32(binary.NativeEndian.Uint16([]byte{0, 100})), Proto: 17, Family: 4,
			Dir: abi.DirFromWEP, Ifindex: uint32(ifA)}
		a4, b4 := ipA.As4(), ipB.As4()
		copy(k.Saddr[:], a4[:])
		copy(k.Daddr[:], b4[:])
		if err := d.Maps().Frags.Lookup(&k, &v); err != nil || v.Sport != 5000 || v.Dport != 53 || v.Seen == 0 {
			t.Fatalf("dpd_frags entry %+v %v, want ports 5000 -> 53", v, err)
		}
	})
	t.Run("denied first, rest dropped", func(t *testing.T) {
		before := drops(t, d, DropFragNoFirst)
		if got := runAll(t, d, abi.DirFromWEP, ifA, dg(ipA, ipB, 5000, 54, 101)); !allAre(got, abi.TCActShot) {
			t.Fatalf("verdicts %v, want all dropped", got)
		}
		// Dropped by the policy, not for a missing first piece.
		if n := drops(t, d, DropFragNoFirst); n != before {
			t.Fatalf("fragment_without_first went %d -> %d", before, n)
		}
	})
	t.Run("without first piece, dropped and counted", func(t *testing.T) {
		frs := dg(ipA, ipB, 5000, 53, 102)
		before := drops(t, d, DropFragNoFirst)
		_, bytesBefore, _ := d.ReadDrops(DropFragNoFirst)
		if got := runAll(t, d, abi.DirFromWEP, ifA, frs[1:]); !allAre(got, abi.TCActShot) {
			t.Fatalf("verdicts %v, want all dropped", got)
		}
		p, b, err := d.ReadDrops(DropFragNoFirst)
		mustNil(t, err)
		if p != before+2 || b != bytesBefore+uint64(len(frs[1])+len(frs[2])) {
			t.Fatalf("fragment_without_first %d packets %d bytes, want %d, %d", p, b, before+2, bytesBefore+uint64(len(frs[1])+len(frs[2])))
		}
	})
	t.Run("first piece seen at another hook does not count", func(t *testing.T) {
		frs := dg(ipB, ipA, 5000, 99, 103)
		// B's policy allows port 99; its first piece passes ifA's ingress
		// (denied there) but never B's egress.
		run(t, d, abi.DirToWEP, ifA, frs[0])
		before := drops(t, d, DropFragNoFirst)
		if got := run(t, d, abi.DirFromWEP, ifB, frs[1]); got != abi.TCActShot {
			t.Fatalf("verdict %d, want drop", got)
		}
		if n := drops(t, d, DropFragNoFirst); n != before+1 {
			t.Fatalf("fragment_without_first %d, want %d", n, before+1)
		}
		if got := runAll(t, d, abi.DirFromWEP, ifB, frs); !allAre(got, abi.TCActOK) {
			t.Fatalf("in order at B's egress: %v, want all pass", got)
		}
	})
	t.Run("negated port never matches later fragments", func(t *testing.T) {
		// "not port 53" would match ports 0: the later fragments must be
		// judged on port 53, like their first piece.
		frs := dg(ipB, ipA, 5000, 53, 104)
		if got := runAll(t, d, abi.DirFromWEP, ifB, frs); !allAre(got, abi.TCActShot) {
			t.Fatalf("verdicts %v, want all dropped", got)
		}
	})
	t.Run("negated icmp type never matches later fragments", func(t *testing.T) {
		frs := fragments(ipB, ipA, 1, 105, icmpEchoBody(8, 77, 3000), 1480)
		if got := runAll(t, d, abi.DirFromWEP, ifB, frs); !allAre(got, abi.TCActShot) {
			t.Fatalf("echo request: verdicts %v, want all dropped", got)
		}
		frs = fragments(ipB, ipA, 1, 106, icmpEchoBody(0, 77, 3000), 1480)
		if got := runAll(t, d, abi.DirFromWEP, ifB, frs); !allAre(got, abi.TCActOK) {
			t.Fatalf("echo reply: verdicts %v, want all pass", got)
		}
	})
	t.Run("stale first piece does not vouch", func(t *testing.T) {
		frs := dg(ipA, ipB, 5000, 53, 107)
		if got := run(t, d, abi.DirFromWEP, ifA, frs[0]); got != abi.TCActOK {
			t.Fatalf("first: %d", got)
		}
		k := bpf.DpdDpdFragKey{Id: uint32(binary.NativeEndian.Uint16([]byte{0, 107})), Proto: 17, Family: 4,
			Dir: abi.DirFromWEP, Ifindex: uint32(ifA)}
		a4, b4 := ipA.As4(), ipB.As4()
		copy(k.Saddr[:], a4[:])
		copy(k.Daddr[:], b4[:])
		v := bpf.DpdDpdFragVal{Seen: 1, Sport: 5000, Dport: 53}
		mustNil(t, d.Maps().Frags.Update(&k, &v, ebpf.UpdateExist))
		if got := run(t, d, abi.DirFromWEP, ifA, frs[1]); got != abi.TCActShot {
			t.Fatalf("fragment after a first piece older than %ds: %d, want drop", abi.FragTimeoutS, got)
		}
	})
	t.Run("tiny tcp fragment dropped and counted", func(t *testing.T) {
		before := drops(t, d, DropFragTiny)
		f := ipv4Frag(ipA, ipB, 6, 108, 1, false, make([]byte, 16))
		if got := run(t, d, abi.DirFromWEP, ifA, f); got != abi.TCActShot {
			t.Fatalf("verdict %d, want drop", got)
		}
		if n := drops(t, d, DropFragTiny); n != before+1 {
			t.Fatalf("fragment_tiny_tcp %d, want %d", n, before+1)
		}
	})
	t.Run("trace runs write nothing", func(t *testing.T) {
		frs := dg(ipA, ipB, 5000, 53, 109)
		if _, err := runOn(d.Programs().FromWEP, ifA, abi.TraceMark, frs[0], 1); err != nil {
			t.Fatal(err)
		}
		n, err := d.FragmentEntries()
		mustNil(t, err)
		before := drops(t, d, DropFragNoFirst)
		if _, err := runOn(d.Programs().FromWEP, ifA, abi.TraceMark, frs[1], 1); err != nil {
			t.Fatal(err)
		}
		if n2, _ := d.FragmentEntries(); n2 != n {
			t.Fatalf("trace of a first fragment changed dpd_frags: %d -> %d", n, n2)
		}
		if drops(t, d, DropFragNoFirst) != before {
			t.Fatal("a trace run counted a drop")
		}
	})
}

// TestFragmentsNAT: a fragmented UDP datagram to a frontend reaches the
// backend whole: the first fragment is translated as usual, the later ones
// get the backend address with a valid IP checksum and an untouched
// payload, and the reassembled datagram's UDP checksum is valid.
func TestFragmentsNAT(t *testing.T) {
	e := newNATEnv(t)
	fe := NATFrontend{Addr: feAddr.Addr(), Port: 53, Proto: 17}
	be := NATBackend{Addr: beB.Addr, Port: 5353}
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{fe}, []NATBackend{be}, 0))
	client := netip.AddrPortFrom(ipA, 40000)
	dgram := udpDatagram(client, netip.AddrPortFrom(fe.Addr, 53), 3000)
	frs := fragments(ipA, fe.Addr, 17, 200, dgram, 1480)
	var whole []byte
	for i, f := range frs {
		ret, out := runNAT(t, e.d.Programs().FromWEP, e.ifA, e.ifA, f)
		if ret != abi.TCActOK {
			t.Fatalf("fragment %d: verdict %d", i, ret)
		}
		ip := out[14:34]
		if csumFold(csumAdd(0, ip)) != 0 {
			t.Fatalf("fragment %d: bad IP checksum", i)
		}
		if got := netip.AddrFrom4([4]byte(ip[16:20])); got != be.Addr {
			t.Fatalf("fragment %d to %s, want the backend %s", i, got, be.Addr)
		}
		body := out[34 : 14+int(binary.BigEndian.Uint16(ip[2:]))]
		if i > 0 && string(body) != string(f[34:]) {
			t.Fatalf("fragment %d: payload changed", i)
		}
		whole = append(whole, body...)
	}
	if binary.BigEndian.Uint16(whole[2:]) != be.Port {
		t.Fatalf("destination port %d, want %d", binary.BigEndian.Uint16(whole[2:]), be.Port)
	}
	s, dd := ipA.As4(), be.Addr.As4()
	sum := csumAdd(csumAdd(0, s[:]), dd[:]) + 17 + uint32(len(whole))
	if csumFold(csumAdd(sum, whole)) != 0 {
		t.Fatal("reassembled datagram has a bad UDP checksum")
	}
	// A later fragment whose connection has no NAT choice cannot go anywhere.
	other := fragments(ipA, fe.Addr, 17, 201, udpDatagram(netip.AddrPortFrom(ipA, 40001), netip.AddrPortFrom(fe.Addr, 53), 3000), 1480)
	if got := run(t, e.d, abi.DirFromWEP, e.ifA, other[1]); got != abi.TCActShot {
		t.Fatalf("later fragment without its first: %d, want drop", got)
	}
}
