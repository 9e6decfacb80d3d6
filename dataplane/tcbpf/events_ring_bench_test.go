package tcbpf

import (
	"fmt"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// BenchmarkEventRing measures a new denied flow's event (every packet
// reported, interval 0) against events off, interleaved in chunks of
// eventChunk packets with the ring read empty between chunks, for the
// default ring (1 MiB) and a 64 MiB one. The ring is written
// sequentially: a ring the reader keeps up with stays in the cache,
// while in a 64 MiB ring every record lands on memory last touched a
// whole ring ago (a cache miss per line). BenchmarkEvents' "every" cases
// use the 64 MiB ring in one run, the second case.
func BenchmarkEventRing(b *testing.B) {
	for _, ring := range []int{DefaultMapSizes().Events, 1 << 26} {
		b.Run(fmt.Sprintf("ring_%dMiB", ring>>20), func(b *testing.B) {
			d := openTest(b, Options{Sizes: MapSizes{Conntrack: 1024, IPSets: 1024, IfState: 64, RuleCounters: 256,
				Chain: 64, Events: ring}})
			mustNil(b, d.SetIfState(1, 1, abi.IfReady))
			mustNil(b, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(b, d, abi.VerdictDeny, 0xd1)))
			r, err := d.NewEventReader()
			mustNil(b, err)
			defer r.Close()
			deny := udpPkt(ipA, ipB, 7, 7)
			prog := d.Programs().FromWEP
			var off, on time.Duration
			for done := 0; done < b.N; {
				n := min(eventChunk, b.N-done)
				for _, events := range []bool{false, true} {
					mustNil(b, d.SetEvents(events, 0))
					ret, per, err := prog.Benchmark(deny, n, nil)
					if err != nil || ret != abi.TCActShot {
						b.Fatalf("ret %d err %v", ret, err)
					}
					if events {
						on += per * time.Duration(n)
					} else {
						off += per * time.Duration(n)
					}
					for r.Pending() > 0 {
						if _, err := r.Read(); err != nil {
							b.Fatal(err)
						}
					}
				}
				done += n
			}
			if drops, err := d.EventDrops(); err != nil || drops != 0 {
				b.Fatalf("drops %d %v: the chunk must fit the ring", drops, err)
			}
			b.ReportMetric(float64(off.Nanoseconds())/float64(b.N), "off-ns/pkt")
			b.ReportMetric(float64(on.Nanoseconds())/float64(b.N), "on-ns/pkt")
			b.ReportMetric(float64(on)/float64(off), "on/off")
		})
	}
}

// eventChunk packets' events fit the default ring (each record takes
// its 112 bytes and an 8-byte header).
const eventChunk = 4096
