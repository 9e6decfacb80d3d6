package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// benchSnapshot is n endpoints spread over 50 policies that each reference
// one of 20 IP sets of 100 members.
func benchSnapshot(n int) []*felix.ToDataplane {
	var msgs []*felix.ToDataplane
	for s := 0; s < 20; s++ {
		var members []string
		for m := 0; m < 100; m++ {
			members = append(members, fmt.Sprintf("10.%d.%d.%d", s, m/250, m%250+1))
		}
		msgs = append(msgs, ipset(fmt.Sprintf("s:%d", s), members...))
	}
	for p := 0; p < 50; p++ {
		msgs = append(msgs, policy(fmt.Sprintf("p%d", p), allowFrom(fmt.Sprintf("s:%d", p%20)), denyPort(int32(p+1))))
	}
	msgs = append(msgs, profile("kns.default", allowFrom()))
	for i := 0; i < n; i++ {
		msgs = append(msgs, wep(fmt.Sprintf("w%d", i), fmt.Sprintf("10.65.%d.%d", i/250, i%250+1),
			[]string{fmt.Sprintf("p%d", i%50), fmt.Sprintf("p%d", (i+1)%50)}, "kns.default"))
	}
	return append(msgs, inSync())
}

// BenchmarkSnapshotToInSync measures a full snapshot of 2000 endpoints,
// from the first message to DataplaneInSync, against the memory kernel.
func BenchmarkSnapshotToInSync(b *testing.B) {
	msgs := benchSnapshot(2000)
	for i := 0; i < b.N; i++ {
		ups := make([]model.Update, len(msgs))
		for j, m := range msgs {
			ups[j] = tr(b, m) // the server's part, not measured here
		}
		h := newHarness(b)
		s := h.session()
		start := time.Now()
		for _, u := range ups {
			if err := s.Submit(context.Background(), u); err != nil {
				b.Fatal(err)
			}
		}
		s.waitFor(b, "DataplaneInSync", func(m []Status) bool { return count(m, isInSync) == 1 })
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/snapshot")
	}
}

// BenchmarkPolicyChange measures one policy change re-applying the 40 of
// 2000 endpoints that use it.
func BenchmarkPolicyChange(b *testing.B) {
	h := newHarness(b)
	h.session()
	h.send(benchSnapshot(2000)...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.send(policy("p7", allowFrom("s:7"), denyPort(int32(1000+i%2))))
	}
}

// fanOutSnapshot is 1000 endpoints on one shared policy, then InSync.
func fanOutSnapshot() []*felix.ToDataplane {
	msgs := []*felix.ToDataplane{ipset("s:0", "10.1.0.1"), policy("shared", allowFrom("s:0"), denyPort(1)),
		profile("kns.default", allowFrom())}
	for i := 0; i < 1000; i++ {
		msgs = append(msgs, wep(fmt.Sprintf("w%d", i), fmt.Sprintf("10.65.%d.%d", i/250, i%250+1),
			[]string{"shared"}, "kns.default"))
	}
	return append(msgs, inSync())
}

// BenchmarkPolicyFanOut measures one change of a policy that all 1000
// endpoints use (the P2 fan-out figure, engine side, on the memory kernel).
func BenchmarkPolicyFanOut(b *testing.B) {
	h := newHarness(b)
	h.session()
	h.send(fanOutSnapshot()...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h.send(policy("shared", allowFrom("s:0"), denyPort(int32(1000+i%2))))
	}
}
