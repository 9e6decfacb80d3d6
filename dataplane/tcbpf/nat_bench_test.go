package tcbpf

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// BenchmarkNAT measures the service paths per packet with the kernel's
// BPF_PROG_TEST_RUN timer. The packets arrive on ifindex 1 (lo), as in
// BenchmarkEntry.
//
// A translated packet is rewritten in place and BPF_PROG_TEST_RUN repeats a
// program on the same buffer, so the repeated cases use two services that
// are each other's backend (10.96.0.10:80 -> 10.96.0.11:80 and back): every
// repetition is a complete translation of an established connection.
//
//	trivial         a program that only returns TC_ACT_OK (the baseline)
//	plain_ct_hit    established flow to a non-service address: frontend miss + conntrack hit
//	nat_established established connection to a frontend: frontend hit, NAT flow hit,
//	                DNAT rewrite (addresses and checksums), conntrack hit
//	nat_reply       its reply: conntrack reverse hit + reverse NAT rewrite
//	nat_deny        a connection the policy denies: translation, both conntrack misses,
//	                route lookup, policy tail call, epilogue (no inserts)
//
// A new connection inserts a NAT flow and a conntrack entry, which only the
// first run of a buffer does, so it is timed one packet per syscall
// (repeat 1), against the trivial program timed the same way:
//
//	once_trivial    the baseline, one run per syscall
//	once_nat_established  nat_established timed the same way (cold caches)
//	once_nat_new    backend choice, NAT flow insert, DNAT, allow policy, conntrack insert
func BenchmarkNAT(b *testing.B) {
	d := openTest(b, Options{Sizes: MapSizes{Conntrack: 262144, IPSets: 1024, IfState: 64, RuleCounters: 256, Chain: 64}})
	waitClockCalibrated(b, d)
	allow := verdictProg(b, d, abi.VerdictAllow, 0)
	deny := verdictProg(b, d, abi.VerdictDeny, 0)
	mustNil(b, d.InstallPolicy(0, abi.DirFromWEP, allow))
	mustNil(b, d.InstallPolicy(0, abi.DirToWEP, allow))
	mustNil(b, d.InstallPolicy(1, abi.DirFromWEP, deny))
	mustNil(b, d.SetIfState(1, 0, abi.IfReady))
	f1, f2 := ap("10.96.0.10:80"), ap("10.96.0.11:80")
	mustNil(b, d.ProgramNATPort(7, []NATFrontend{{Addr: f1.Addr(), Port: 80, Proto: 6}},
		[]NATBackend{{Addr: f2.Addr(), Port: 80}}, 0))
	mustNil(b, d.ProgramNATPort(8, []NATFrontend{{Addr: f2.Addr(), Port: 80, Proto: 6}},
		[]NATBackend{{Addr: f1.Addr(), Port: 80}}, 0))

	client := netip.AddrPortFrom(ipA, 40000)
	est := csumPkt(6, client, f1, tcpACK, false)
	plain := csumPkt(6, client, ap("10.65.0.9:80"), tcpACK, false)
	// Seed both directions of the flip-flop and the plain flow.
	for _, f := range [][]byte{est, csumPkt(6, client, f2, tcpACK, false), plain} {
		if ret, _, err := d.Programs().FromWEP.Test(f); err != nil || ret != abi.TCActOK {
			b.Fatalf("seeding: %d %v", ret, err)
		}
	}
	reply := csumPkt(6, f2, client, tcpACK, false)
	denied := csumPkt(6, netip.AddrPortFrom(ipB, 40000), f1, tcpACK, false)

	runRepeated(b, d, []benchCase{
		{"trivial", trivialProg(b), est, 0, abi.TCActOK},
		{"plain_ct_hit", d.Programs().FromWEP, plain, 0, abi.TCActOK},
		{"nat_established", d.Programs().FromWEP, est, 0, abi.TCActOK},
		{"nat_reply", d.Programs().ToWEP, reply, 0, abi.TCActOK},
		{"nat_deny", d.Programs().FromWEP, denied, 1, abi.TCActShot},
	})

	mustNil(b, d.SetIfState(1, 0, abi.IfReady))
	once := []struct {
		name  string
		prog  *ebpf.Program
		frame func(i int) []byte
	}{
		{"once_trivial", trivialProg(b), func(int) []byte { return est }},
		{"once_nat_established", d.Programs().FromWEP, func(int) []byte { return est }},
		{"once_nat_new", d.Programs().FromWEP, func(i int) []byte {
			src := netip.AddrFrom4([4]byte{10, 66, byte(i >> 16), byte(i >> 8)})
			return csumPkt(6, netip.AddrPortFrom(src, uint16(1024+i&0xff)), f1, tcpSYN, false)
		}},
	}
	for _, tc := range once {
		b.Run(tc.name, func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				ret, per, err := tc.prog.Benchmark(tc.frame(i), 1, nil)
				if err != nil || ret != abi.TCActOK {
					b.Fatalf("run %d: ret %d err %v", i, ret, err)
				}
				total += per
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/pkt")
		})
	}
}
