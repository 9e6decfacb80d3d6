package tcbpf

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// BenchmarkEntry measures dpd_from_wep per packet with the kernel's own
// BPF_PROG_TEST_RUN timer. prog.Benchmark passes no context, so the
// packets arrive on ifindex 1 (lo), which gets an ifstate entry here.
//
//	trivial     a program that only returns TC_ACT_OK (the baseline)
//	ct_hit      an established flow: parse + forward conntrack hit
//	ct_reply    a reply: forward miss + reverse hit
//	policy_deny no flow: both lookups miss, tail call to a deny policy and
//	            the epilogue (the new-flow path without the conntrack write)
func BenchmarkEntry(b *testing.B) {
	d := openTest(b, Options{})
	mustNil(b, d.SetIfState(1, 0, abi.IfReady))
	mustNil(b, d.InstallPolicy(0, abi.DirFromWEP, verdictProg(b, d, abi.VerdictAllow, 0)))
	mustNil(b, d.InstallPolicy(0, abi.DirToWEP, verdictProg(b, d, abi.VerdictDeny, 0)))
	mustNil(b, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(b, d, abi.VerdictDeny, 0)))
	flow := tcpPkt(ipA, ipB, 40000, 80, tcpACK)
	reply := tcpPkt(ipB, ipA, 80, 40000, tcpACK)
	if ret, _, err := d.Programs().FromWEP.Test(flow); err != nil || ret != abi.TCActOK {
		b.Fatalf("seeding the flow: %d %v", ret, err)
	}

	runRepeated(b, d, []benchCase{
		{"trivial", trivialProg(b), flow, 0, abi.TCActOK},
		{"ct_hit", d.Programs().FromWEP, flow, 0, abi.TCActOK},
		{"ct_reply", d.Programs().ToWEP, reply, 0, abi.TCActOK},
		{"policy_deny", d.Programs().FromWEP, udpPkt(ipA, ipB, 7, 7), 1, abi.TCActShot},
	})
}

// benchCase is one frame run repeatedly through prog by BPF_PROG_TEST_RUN,
// on ifindex 1 with policy slot slot; every run must return want.
type benchCase struct {
	name  string
	prog  *ebpf.Program
	frame []byte
	slot  uint32
	want  uint32
}

// runRepeated runs each case as a sub-benchmark timed per packet.
func runRepeated(b *testing.B, d *Datapath, cases []benchCase) {
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			mustNil(b, d.SetIfState(1, tc.slot, abi.IfReady))
			ret, per, err := tc.prog.Benchmark(tc.frame, b.N, b.ResetTimer)
			if err != nil || ret != tc.want {
				b.Fatalf("ret %d err %v, want %d", ret, err, tc.want)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
}
