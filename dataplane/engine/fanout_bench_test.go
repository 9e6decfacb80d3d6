package engine

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
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
	h, k := newWrappedHarness(b, func(m *memkernel.Kernel) *firstApplyKernel { return &firstApplyKernel{Kernel: m} })
	h.session()
	h.send(fanOutSnapshot()...)
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
