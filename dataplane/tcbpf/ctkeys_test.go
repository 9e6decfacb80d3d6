package tcbpf

import (
	"net/netip"
	"testing"

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
