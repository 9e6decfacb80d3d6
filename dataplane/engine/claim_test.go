package engine

import (
	"slices"
	"sync"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// claimKernel is the memory kernel as a kernel holding pinned programs of
// an earlier process: it records the order of adoptions, IP set writes and
// endpoint applies.
type claimKernel struct {
	*memkernel.Kernel
	mu        sync.Mutex
	unclaimed bool
	calls     []string
	adopted   []string // workloads handed to AdoptPinnedPolicies
}

func (k *claimKernel) note(c string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, c)
}

func (k *claimKernel) UnclaimedPinnedPolicies() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.unclaimed
}

func (k *claimKernel) AdoptPinnedPolicies(eps []*model.Endpoint) {
	k.note("adopt")
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ep := range eps {
		k.adopted = append(k.adopted, ep.ID.Workload)
	}
	k.unclaimed = false
}

func (k *claimKernel) ReplaceIPSet(id string, typ model.IPSetType, m []model.IPSetMember) error {
	k.note("ipset")
	return k.Kernel.ReplaceIPSet(id, typ, m)
}

func (k *claimKernel) ApplyEndpoint(ep *model.Endpoint) error {
	k.note("endpoint")
	return k.Kernel.ApplyEndpoint(ep)
}

func (k *claimKernel) snapshot() ([]string, []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.calls), slices.Clone(k.adopted)
}

// TestAdoptPinnedBeforeSets: a kernel with unclaimed pinned programs is
// handed the pass's endpoints, resolved, before the pass writes IP sets;
// one without them is not asked.
func TestAdoptPinnedBeforeSets(t *testing.T) {
	for _, unclaimed := range []bool{true, false} {
		var k *claimKernel
		h := newHarness(t, func(o *Options) {
			k = &claimKernel{Kernel: o.Kernel.(*memkernel.Kernel), unclaimed: unclaimed}
			o.Kernel = k
		})
		h.session()
		h.send(ipset("s:0", "10.1.0.1"), policy("p", allowFrom("s:0")), profile("kns.default", allowFrom()),
			wep("a", "10.65.0.1", []string{"p"}, "kns.default"), inSync())
		h.flush()
		calls, adopted := k.snapshot()
		first := func(c string) int { return slices.Index(calls, c) }
		if first("ipset") < 0 || first("endpoint") < 0 {
			t.Fatalf("unclaimed %v: calls %v, want IP set and endpoint writes", unclaimed, calls)
		}
		if !unclaimed {
			if first("adopt") >= 0 {
				t.Errorf("no pinned programs, yet the kernel was asked to adopt: %v", calls)
			}
			continue
		}
		if i := first("adopt"); i < 0 || i > first("ipset") {
			t.Errorf("calls %v: want the adoption before the first IP set write", calls)
		}
		if len(adopted) != 1 || adopted[0] != wid("a").Workload {
			t.Errorf("adopted %v, want endpoint a", adopted)
		}
	}
}
