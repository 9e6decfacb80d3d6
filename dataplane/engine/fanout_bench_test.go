package engine

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// firstApplyKernel is the memory kernel noting when the first
// ApplyEndpoint after mark happens.
type firstApplyKernel struct {
	*memkernel.Kernel
	first atomic.Int64 // unix ns; 0 until the first apply after mark
}

func (k *firstApplyKernel) ApplyEndpoint(ep *model.Endpoint) error {
	k.first.CompareAndSwap(0, time.Now().UnixNano())
	return k.Kernel.ApplyEndpoint(ep)
}

// BenchmarkPolicyFanOutFirstApply: as BenchmarkPolicyFanOut, reporting
// the time from the submission of the change to the engine's first
// ApplyEndpoint (with policy groups, when every endpoint of the group
// enforces the change) and to the end of the pass.
func BenchmarkPolicyFanOutFirstApply(b *testing.B) {
	var k *firstApplyKernel
	h := newHarness(b, func(o *Options) {
		k = &firstApplyKernel{Kernel: o.Kernel.(*memkernel.Kernel)}
		o.Kernel = k
	})
	h.session()
	msgs := []*felix.ToDataplane{ipset("s:0", "10.1.0.1"), policy("shared", allowFrom("s:0"), denyPort(1)),
		profile("kns.default", allowFrom())}
	for i := 0; i < 1000; i++ {
		msgs = append(msgs, wep(fmt.Sprintf("w%d", i), fmt.Sprintf("10.65.%d.%d", i/250, i%250+1),
			[]string{"shared"}, "kns.default"))
	}
	h.send(append(msgs, inSync())...)
	var first, all time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k.first.Store(0)
		start := time.Now()
		h.send(policy("shared", allowFrom("s:0"), denyPort(int32(1000+i%2))))
		all += time.Since(start)
		first += time.Duration(k.first.Load() - start.UnixNano())
	}
	b.ReportMetric(float64(first)/float64(b.N)/float64(time.Millisecond), "first-apply-ms")
	b.ReportMetric(float64(all)/float64(b.N)/float64(time.Millisecond), "flushed-ms")
}
