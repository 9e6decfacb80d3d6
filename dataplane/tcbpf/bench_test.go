package tcbpf

import (
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// BenchmarkEntry measures dpd_from_wep per packet with the kernel's own
// BPF_PROG_TEST_RUN timer. prog.Benchmark passes no context, so the
// packets arrive on ifindex 1 (lo), which gets an ifstate entry here.
//
//	trivial     a program that only returns TC_ACT_OK (the baseline)
//	ct_hit      an established flow: parse + forward conntrack hit
//	ct_reply    a reply: a hit of the same (normalized) key
//	policy_deny no flow: the conntrack lookup misses, tail call to a deny policy and
//	            the epilogue (the new-flow path without the conntrack write)
func BenchmarkEntry(b *testing.B) {
	d := openTest(b, Options{})
	waitClockCalibrated(b, d)
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

// BenchmarkEvents compares the new-flow path with flow events off and on,
// and the established path (which never looks at events) under both. The
// ring is 64 MiB so that, at -benchtime=200000x, every event of the
// "every" cases is written rather than dropped (drops are reported).
//
//	deny_off          a new denied flow, events off: the baseline
//	deny_on_every     events on, every packet reported (interval 0): the
//	                  cost of a new flow's event
//	deny_on_limited   events on, the flow already reported: the rate
//	                  limiter's lookup and count
//	deny_on_limited_preview(_none)  deny_on_limited with the staged
//	                  preview on: a preview program that runs on every
//	                  decided packet (or none in the slot: a failed tail call)
//	ct_hit_off/on     an established flow
//	allow_new_off/on  a new allowed flow (conntrack entry created), a
//	                  different flow every run: one BPF_PROG_TEST_RUN per
//	                  packet, the kernel's time of each summed
func BenchmarkEvents(b *testing.B) {
	d := openTest(b, Options{Sizes: MapSizes{Conntrack: 1 << 20, IPSets: 1024, IfState: 64, RuleCounters: 256,
		Chain: 64, Events: 1 << 26}})
	waitClockCalibrated(b, d)
	mustNil(b, d.SetIfState(1, 0, abi.IfReady))
	mustNil(b, d.InstallPolicy(0, abi.DirFromWEP, verdictProg(b, d, abi.VerdictAllow, 0xa1)))
	mustNil(b, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(b, d, abi.VerdictDeny, 0xd1)))
	// Slot 1 has a staged preview (a stand-in that allows), slot 2 the
	// same policy without one.
	mustNil(b, d.InstallPreview(1, abi.DirFromWEP, verdictProg(b, d, abi.VerdictAllow, 0xa2)))
	mustNil(b, d.InstallPolicy(2, abi.DirFromWEP, verdictProg(b, d, abi.VerdictDeny, 0xd1)))
	flow := tcpPkt(ipA, ipB, 40000, 80, tcpACK)
	if ret, _, err := d.Programs().FromWEP.Test(flow); err != nil || ret != abi.TCActOK {
		b.Fatalf("seeding the flow: %d %v", ret, err)
	}
	r, err := d.NewEventReader()
	mustNil(b, err)
	defer r.Close()
	deny := udpPkt(ipA, ipB, 7, 7)
	for _, tc := range []struct {
		name     string
		on       bool
		interval time.Duration
		c        benchCase
	}{
		{"deny_off", false, 0, benchCase{"", d.Programs().FromWEP, deny, 1, abi.TCActShot}},
		{"deny_on_every", true, 0, benchCase{"", d.Programs().FromWEP, deny, 1, abi.TCActShot}},
		{"deny_on_limited", true, time.Hour, benchCase{"", d.Programs().FromWEP, deny, 1, abi.TCActShot}},
		{"deny_on_limited_preview_none", true, time.Hour, benchCase{"", d.Programs().FromWEP, deny, 2, abi.TCActShot}},
		{"deny_on_limited_preview", true, time.Hour, benchCase{"", d.Programs().FromWEP, deny, 1, abi.TCActShot}},
		{"ct_hit_off", false, 0, benchCase{"", d.Programs().FromWEP, flow, 0, abi.TCActOK}},
		{"ct_hit_on", true, 0, benchCase{"", d.Programs().FromWEP, flow, 0, abi.TCActOK}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			mustNil(b, d.SetEventsPreview(tc.on, tc.interval, strings.Contains(tc.name, "preview")))
			mustNil(b, d.SetIfState(1, tc.c.slot, abi.IfReady))
			// Seed the rate limiter and empty the ring.
			_, _, _ = tc.c.prog.Test(tc.c.frame)
			for r.Pending() > 0 {
				if _, err := r.Read(); err != nil {
					b.Fatal(err)
				}
			}
			before, err := d.EventDrops()
			mustNil(b, err)
			ret, per, err := tc.c.prog.Benchmark(tc.c.frame, b.N, b.ResetTimer)
			if err != nil || ret != tc.c.want {
				b.Fatalf("ret %d err %v, want %d", ret, err, tc.c.want)
			}
			after, err := d.EventDrops()
			mustNil(b, err)
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
			b.ReportMetric(float64(after-before), "drops")
		})
	}
	for _, c := range []struct {
		name string
		on   bool
		slot uint32
		want uint32
	}{
		{"allow_new_off", false, 0, abi.TCActOK}, {"allow_new_on", true, 0, abi.TCActOK},
	} {
		on := c.on
		b.Run(c.name, func(b *testing.B) {
			mustNil(b, d.SetEvents(on, time.Second))
			mustNil(b, d.SetIfState(1, c.slot, abi.IfReady))
			prog := d.Programs().FromWEP
			var total time.Duration
			b.ResetTimer()
			for i := range b.N {
				// A flow no earlier run created: seed i picks the ports.
				seed := uint32(i) + 1<<20
				if on {
					seed += 1 << 24
				}
				frame := udpPkt(ipA, ipB, uint16(seed), uint16(seed>>16))
				ret, per, err := prog.Benchmark(frame, 1, nil)
				if err != nil || ret != c.want {
					b.Fatalf("ret %d err %v", ret, err)
				}
				total += per
				if r.Pending() > 1<<24 {
					for r.Pending() > 0 {
						if _, err := r.Read(); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns/pkt")
		})
	}
}

// BenchmarkEventRead measures userspace's cost per flow event: the ring is
// filled by the programs (a denied flow reported on every packet), then
// read and decoded. At 20,000 new flows/s, dpd spends ns/event × 20,000
// per second reading them.
func BenchmarkEventRead(b *testing.B) {
	d := openTest(b, Options{Sizes: MapSizes{Conntrack: 1024, IPSets: 1024, IfState: 64, RuleCounters: 256,
		Chain: 64, Events: 1 << 26}})
	mustNil(b, d.SetIfState(1, 1, abi.IfReady))
	mustNil(b, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(b, d, abi.VerdictDeny, 0xd1)))
	mustNil(b, d.SetEvents(true, 0))
	r, err := d.NewEventReader()
	mustNil(b, err)
	defer r.Close()
	deny := udpPkt(ipA, ipB, 7, 7)
	const batch = 100000 // fits the ring: 100,000 x 112 bytes
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		b.StopTimer()
		if _, _, err := d.Programs().FromWEP.Benchmark(deny, n, nil); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for range n {
			if _, err := r.Read(); err != nil {
				b.Fatal(err)
			}
		}
		done += n
	}
	b.StopTimer()
	if drops, err := d.EventDrops(); err != nil || drops != 0 {
		b.Fatalf("drops %d %v", drops, err)
	}
}
