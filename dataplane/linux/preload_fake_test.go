package linux

import (
	"slices"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Preloading loads each distinct program of a batch once, in parallel,
// so that applying the batch loads nothing; a preload no endpoint took is
// released at the end of the pass. Loads are counted, not timed.
func TestPreloadCountsLoads(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	var eps []*model.Endpoint
	for i, name := range []string{"cali1", "cali2", "cali3", "cali4"} {
		f.addLink(name)
		k.onLink(linkUp(name))
		eps = append(eps, f.endpoint(name, i+1, []string{"web", "db"}[i%2], "all"))
	}
	eps = append(eps, f.endpoint("cali9", 9, "absent", "all")) // no interface: skipped
	f.take()

	k.PreloadPolicies(eps)
	if got, want := sortedOps(f.take(), "Load "), []string{"Load egress:all", "Load ingress:db", "Load ingress:web"}; !slices.Equal(got, want) {
		t.Fatalf("preload loaded %q, want %q", got, want)
	}
	for _, ep := range eps {
		if err := k.ApplyEndpoint(ep); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(sortedOps(f.take(), "Load ")); n != 0 {
		t.Fatalf("applying the preloaded batch loaded %d programs", n)
	}
	checkUnclaimed(t, k, 0)
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	if got := sortedOps(f.take(), "Close "); len(got) != 0 {
		t.Fatalf("released programs endpoints took: %q", got)
	}

	// cali1 is going to change policy, but its apply never comes.
	changed := f.endpoint("cali1", 1, "web-v2", "all")
	k.PreloadPolicies([]*model.Endpoint{changed})
	if got := sortedOps(f.take(), "Load "); !slices.Equal(got, []string{"Load ingress:web-v2"}) {
		t.Fatalf("second preload loaded %q", got)
	}
	checkUnclaimed(t, k, 1)
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	if got := sortedOps(f.take(), "Close "); !slices.Equal(got, []string{"Close ingress:web-v2"}) {
		t.Fatalf("end of pass released %q, want the unused preload", got)
	}
	if strings.Contains(f.dump(), "web-v2") {
		t.Fatalf("the unused preload is still in the kernel:\n%s", f.dump())
	}
	checkUnclaimed(t, k, 0)
}

// checkUnclaimed: the programmer's list of untaken preloads, which the
// releases walk instead of every program, is exactly its preloaded
// programs, n of them.
func checkUnclaimed(t *testing.T, k *Kernel, n int) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	var preloaded []progKey
	for key, sp := range k.pols.progs {
		if sp.preloaded {
			preloaded = append(preloaded, key)
		}
	}
	if len(preloaded) != n || len(k.pols.unclaimed) != n {
		t.Fatalf("%d preloaded programs, %d unclaimed, want %d", len(preloaded), len(k.pols.unclaimed), n)
	}
	for _, key := range preloaded {
		if k.pols.unclaimed[key] != k.pols.progs[key] {
			t.Fatalf("preloaded program %s is not listed as unclaimed", key)
		}
	}
}

// sortedOps are the operations with prefix, sorted (parallel loads come
// in any order).
func sortedOps(ops []string, prefix string) []string {
	var out []string
	for _, o := range ops {
		if strings.HasPrefix(o, prefix) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}
