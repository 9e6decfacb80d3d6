package tcbpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// A flow and its reply at the opposite hook share one key; the same
// direction at the opposite hook does not. FlowOf gives back what the
// approving hook saw.
func TestCTFlowKeyNormalized(t *testing.T) {
	ap := netip.MustParseAddrPort
	cases := []struct {
		name     string
		src, dst netip.AddrPort
		proto    uint8
	}{
		{"v4 from lower", ap("10.0.0.1:40000"), ap("10.0.0.2:80"), 6},
		{"v4 from higher", ap("10.0.0.9:40000"), ap("10.0.0.2:80"), 6},
		{"v4 same address, port order", ap("10.0.0.2:9000"), ap("10.0.0.2:80"), 17},
		{"v6 from higher", ap("[fd00::9]:5353"), ap("[fd00::1]:53"), 17},
		{"icmp echo from higher", ap("10.0.0.9:77"), ap("10.0.0.2:0"), 1},
		{"icmpv6 echo from lower", ap("[fd00::1]:77"), ap("[fd00::9]:0"), 58},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, dir := range []uint8{abi.DirFromWEP, abi.DirToWEP} {
				k, flags := CTFlowKey(c.src, c.dst, c.proto, dir, 7)
				rsrc, rdst := c.dst, c.src
				if ctIsICMP(c.proto) {
					// Echo replies keep the identifier as sport.
					rsrc, rdst = netip.AddrPortFrom(c.dst.Addr(), c.src.Port()), netip.AddrPortFrom(c.src.Addr(), c.dst.Port())
				}
				rk, rflags := CTFlowKey(rsrc, rdst, c.proto, dir^1, 7)
				if rk != k || rflags == flags {
					t.Fatalf("dir %d: reply key %+v/%x, flow key %+v/%x: want the same key, the other orientation", dir, rk, rflags, k, flags)
				}
				if same, _ := CTFlowKey(c.src, c.dst, c.proto, dir^1, 7); same == k {
					t.Fatalf("dir %d: the flow at the opposite hook has the flow's key", dir)
				}
				if ctLegacy(&k) {
					t.Fatalf("normalized key %+v reads as legacy", k)
				}
				f := FlowOf(&k, &CTVal{Flags: flags})
				if netip.AddrPortFrom(ctTestAddr(f.Saddr, c.src.Addr()), f.Sport) != c.src ||
					netip.AddrPortFrom(ctTestAddr(f.Daddr, c.src.Addr()), f.Dport) != c.dst || f.Dir != dir {
					t.Fatalf("dir %d: FlowOf = %+v, want %s -> %s", dir, f, c.src, c.dst)
				}
			}
		})
	}
}

func ctTestAddr(b [16]byte, like netip.Addr) netip.Addr {
	if like.Is4() {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

// Conntrack passes replies and only replies whichever end of the flow
// has the lower address.
func TestConntrackBothOrientations(t *testing.T) {
	d := openTest(t, Options{})
	_, ifB := vethPair(t)
	// B accepts anything and sends nothing of its own.
	policeIface(t, d, ifB, 2, abi.VerdictDeny, abi.VerdictAllow)
	for i, c := range []struct{ client, server netip.Addr }{{ipA, ipB}, {ipB, ipA}} {
		sport := uint16(41000 + i)
		syn := tcpPkt(c.client, c.server, sport, 80, tcpSYN)
		if got := run(t, d, abi.DirToWEP, ifB, syn); got != abi.TCActOK {
			t.Fatalf("%s -> %s: allowed SYN: %d", c.client, c.server, got)
		}
		if got := run(t, d, abi.DirFromWEP, ifB, tcpPkt(c.server, c.client, 80, sport, tcpSYN|tcpACK)); got != abi.TCActOK {
			t.Fatalf("%s -> %s: reply on a denying egress: %d, want pass", c.client, c.server, got)
		}
		// The flow's own direction at the other hook is not a reply.
		if got := run(t, d, abi.DirFromWEP, ifB, tcpPkt(c.client, c.server, sport, 80, tcpACK)); got != abi.TCActShot {
			t.Fatalf("%s -> %s: the flow's direction on the denying egress: %d, want drop", c.client, c.server, got)
		}
		key, flags := CTFlowKey(netip.AddrPortFrom(c.client, sport), netip.AddrPortFrom(c.server, 80), 6, abi.DirToWEP, uint32(ifB))
		var v ctVal
		mustNil(t, d.Maps().Conntrack.Lookup(&key, &v))
		if v.Flags&abi.CTFOrigHi != flags || v.Flags&abi.CTFEstablished == 0 || v.PktsFwd != 1 || v.PktsRev != 1 {
			t.Fatalf("%s -> %s: entry %+v, want orientation flag %x, established, one packet each way", c.client, c.server, v, flags)
		}
	}
}

// Entries of a dpd before normalized keys keep passing replies while the
// legacy lookup is on; while such a dpd's entry programs may run, new
// entries are written the way they read them; the scan retires both once
// neither is left, two scans in a row.
func TestConntrackLegacyKeys(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	policeIface(t, d, ifA, 1, abi.VerdictAllow, abi.VerdictDeny)
	flags := func() uint32 {
		t.Helper()
		var cfg struct{ Flags uint32 }
		mustNil(t, d.Maps().CTCfg.Lookup(uint32(0), &cfg))
		if cfg.Flags != d.ctFlags.Load() {
			t.Fatalf("dpd_ct_cfg %x, mirrored as %x", cfg.Flags, d.ctFlags.Load())
		}
		return cfg.Flags
	}
	scan := func() uint32 {
		t.Helper()
		if _, err := d.ScanConntrack(time.Now()); err != nil {
			t.Fatal(err)
		}
		return flags()
	}
	if f := flags(); f != 0 {
		t.Fatalf("legacy flags %x for a node that had no conntrack", f)
	}
	// The old layout: the approving hook's tuple as it was, here from the
	// higher address.
	hi, lo := ipB, ipA
	if ctAddrCmp(ptr16(hi), ptr16(lo)) < 0 {
		hi, lo = lo, hi
	}
	old := ctKey{Sport: 40000, Dport: 80, Proto: 6, Dir: abi.DirFromWEP, Ifindex: uint32(ifA)}
	h4, l4 := hi.As4(), lo.As4()
	copy(old.Saddr[:], h4[:])
	copy(old.Daddr[:], l4[:])
	if !ctLegacy(&old) {
		t.Fatalf("%+v does not read as legacy", old)
	}
	kt, err := ktime(time.Now())
	mustNil(t, err)
	mustNil(t, d.Maps().Conntrack.Put(&old, &ctVal{Created: kt, LastSeen: kt}))
	reply := tcpPkt(lo, hi, 80, 40000, tcpACK)

	if got := run(t, d, abi.DirToWEP, ifA, reply); got != abi.TCActShot {
		t.Fatalf("reply of a legacy entry with the legacy lookup off: %d, want drop (the test would prove nothing)", got)
	}
	mustNil(t, d.setCTCfg(abi.CTCfgLegacy|abi.CTCfgWriteLegacy))
	if got := run(t, d, abi.DirToWEP, ifA, reply); got != abi.TCActOK {
		t.Fatalf("reply of a legacy entry: %d, want pass", got)
	}
	// Written the old way: an older entry program finds it under its key.
	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(hi, lo, 40001, 80, tcpSYN)); got != abi.TCActOK {
		t.Fatalf("allowed SYN: %d", got)
	}
	written := old
	written.Sport = 40001
	var v ctVal
	if err := d.Maps().Conntrack.Lookup(&written, &v); err != nil || v.Flags&abi.CTFOrigHi != 0 {
		t.Fatalf("entry under the old key: %+v %v", v, err)
	}
	if got := run(t, d, abi.DirToWEP, ifA, tcpPkt(lo, hi, 80, 40001, tcpSYN|tcpACK)); got != abi.TCActOK {
		t.Fatalf("reply of an entry written the old way: %d, want pass", got)
	}

	// An older dpd's entry program still on an interface keeps both.
	prev, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "dpd_from_wep", Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, abi.TCActOK), asm.Return()},
	})
	mustNil(t, err)
	defer func() { _ = prev.Close() }()
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifA, Program: prev, Attach: ebpf.AttachTCXIngress})
	mustNil(t, err)
	defer func() { _ = l.Close() }()
	mustNil(t, d.Maps().Conntrack.Delete(&old))
	mustNil(t, d.Maps().Conntrack.Delete(&written))
	if f := scan(); f != abi.CTCfgLegacy|abi.CTCfgWriteLegacy {
		t.Fatalf("flags %x with an older entry program attached, want both", f)
	}
	mustNil(t, l.Close())
	// Gone: entries are written normalized; the lookup stays for the
	// legacy entries there are, and one clean scan is not enough.
	mustNil(t, d.Maps().Conntrack.Put(&old, &ctVal{Created: kt, LastSeen: kt}))
	if f := scan(); f != abi.CTCfgLegacy {
		t.Fatalf("flags %x with a legacy entry and no older program, want the lookup only", f)
	}
	mustNil(t, d.Maps().Conntrack.Delete(&old))
	if f := scan(); f != abi.CTCfgLegacy {
		t.Fatalf("flags %x after one clean scan, want the lookup still", f)
	}
	if f := scan(); f != 0 {
		t.Fatalf("flags %x after two clean scans, want none", f)
	}
}

func ptr16(a netip.Addr) *[16]byte {
	var b [16]byte
	a4 := a.As4()
	copy(b[:], a4[:])
	return &b
}

// policeIface makes ifindex a ready endpoint in slot whose egress (from
// the workload) and ingress policies return the verdicts given.
func policeIface(t *testing.T, d *Datapath, ifindex int, slot uint32, from, to int32) {
	t.Helper()
	mustNil(t, d.SetIfState(ifindex, slot, abi.IfReady))
	mustNil(t, d.InstallPolicy(slot, abi.DirFromWEP, verdictProg(t, d, from, 0)))
	mustNil(t, d.InstallPolicy(slot, abi.DirToWEP, verdictProg(t, d, to, 0)))
}
