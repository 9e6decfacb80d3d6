package engine

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// The cold-start load (P3): 100 sets of 1,000 members.
const (
	memSets       = 100
	memSetMembers = 1000
)

// memberlessKernel is a memkernel that records sets without their members,
// so that a heap measurement counts only what the engine holds.
type memberlessKernel struct{ *memkernel.Kernel }

func (k memberlessKernel) ReplaceIPSet(id string, typ model.IPSetType, _ []model.IPSetMember) error {
	return k.Kernel.ReplaceIPSet(id, typ, nil)
}

func (k memberlessKernel) UpdateIPSet(id string, _, _ []model.IPSetMember) error {
	return k.Kernel.UpdateIPSet(id, nil, nil)
}

// memSetMessages are the sets of the cold start. Built per call so that
// nothing outside the engine keeps them.
func memSetMessages() []*felix.ToDataplane {
	msgs := make([]*felix.ToDataplane, 0, memSets)
	for s := range memSets {
		members := make([]string, 0, memSetMembers)
		for i := range memSetMembers {
			members = append(members, fmt.Sprintf("10.%d.%d.%d", s, i/250, i%250+1))
		}
		msgs = append(msgs, ipset(fmt.Sprintf("s:%d", s), members...))
	}
	return msgs
}

// ipsetBytesPerMember programs the cold start's sets and returns the heap
// they hold after GC, per member. memberless leaves the kernel's copy out.
func ipsetBytesPerMember(tb testing.TB, memberless bool) float64 {
	tb.Helper()
	h := newHarness(tb, func(o *Options) {
		if memberless {
			o.Kernel = memberlessKernel{o.Kernel.(*memkernel.Kernel)}
		}
	})
	h.session()
	h.send(inSync())
	before := testutil.LiveHeap()
	h.send(memSetMessages()...)
	after := testutil.LiveHeap()
	if n := len(h.k.IPSets()); n != memSets {
		tb.Fatalf("kernel has %d sets, want %d", n, memSets)
	}
	runtime.KeepAlive(h)
	return float64(int64(after)-int64(before)) / (memSets * memSetMembers)
}

// TestIPSetMemoryPerMember bounds what the engine holds per IP set member
// (a map of members cost ~100 bytes each, past the P6 memory budget).
func TestIPSetMemoryPerMember(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100,000 members")
	}
	got := ipsetBytesPerMember(t, true)
	t.Logf("engine: %.1f bytes per member", got)
	if got > 48 {
		t.Errorf("engine holds %.1f bytes per IP set member, want <= 48", got)
	}
}

// BenchmarkIPSetMemory reports the heap held per member after a cold start
// of 100 sets x 1,000 members: by the engine alone, and by the engine plus
// the memory kernel's own copy.
func BenchmarkIPSetMemory(b *testing.B) {
	for _, tc := range []struct {
		name       string
		memberless bool
	}{{"engine", true}, {"engine+memkernel", false}} {
		b.Run(tc.name, func(b *testing.B) {
			var per float64
			for range b.N {
				per = ipsetBytesPerMember(b, tc.memberless)
			}
			b.ReportMetric(per, "B/member")
		})
	}
}
