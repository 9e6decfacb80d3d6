package linux

import (
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
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
	k.awaitPreloads()
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
	k.awaitPreloads()
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
// releases walk instead of every program, holds n loaded programs no
// endpoint runs.
func checkUnclaimed(t *testing.T, k *Kernel, n int) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.pols.unclaimed) != n {
		t.Fatalf("%d unclaimed preloads, want %d", len(k.pols.unclaimed), n)
	}
	for key, sp := range k.pols.unclaimed {
		if k.pols.progs[key] != sp || sp.refs != 0 {
			t.Fatalf("unclaimed preload %s: loaded %v, %d references", key, k.pols.progs[key] == sp, sp.refs)
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

// An endpoint whose programs are still loading when its apply comes
// waits for them, not loading them again, and its fresh interface (which
// drops until ready) gets its routes meanwhile, once: the routes cost the
// endpoint no time of their own, and nothing is ready before its policy.
func TestApplyWaitsForItsPreload(t *testing.T) {
	f, k, ep := preloadGateSetup(t)
	ops := applyDuringPreload(t, f, k, ep, nil)
	configured := slices.IndexFunc(ops, func(op string) bool { return strings.HasPrefix(op, "ConfigureNewEndpoint cali1") })
	ready := slices.IndexFunc(ops, func(op string) bool {
		return strings.HasPrefix(op, "SetIfState cali1 ") && strings.HasSuffix(op, " flags=0x3")
	})
	if ready < 0 || ready < configured {
		t.Errorf("cali1 ready (at %d) before its routes (at %d): %q", ready, configured, ops)
	}
	count := func(prefix string) int {
		return len(sortedOps(ops, prefix))
	}
	if got := sortedOps(ops, "Load "); !slices.Equal(got, []string{"Load egress:all", "Load ingress:web"}) {
		t.Errorf("loads %q, want each program once, by the preload", got)
	}
	if n := count("ConfigureNewEndpoint"); n != 1 || count("ConfigureEndpoint") != 0 {
		t.Errorf("routes written %d times (and read back %d times), want once: %q", n, count("ConfigureEndpoint"), ops)
	}
	if n := count("InstallPolicy"); n != 2 {
		t.Errorf("%d policy installs, want 2: %q", n, ops)
	}
	if !strings.Contains(f.dump(), "link cali1 attached=tcx ready egress:all ingress:web nets=[10.0.0.1/32]") {
		t.Errorf("cali1 not programmed:\n%s", f.dump())
	}
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	if got := sortedOps(f.take(), "Close "); len(got) != 0 {
		t.Errorf("released programs the endpoint took: %q", got)
	}
}

// An apply whose programs were planned for preloading but that no worker
// has started (the workers were idle and not yet scheduled) loads them
// itself instead of waiting for a worker, each once.
func TestApplyLoadsItsUnstartedPrograms(t *testing.T) {
	f, k, ep := preloadGateSetup(t)
	f.take()
	// The plan alone, as PreloadPolicies makes it, with none of its
	// workers running yet.
	b, workers := k.planPreload(k.preloadCandidates([]*model.Endpoint{ep}))
	if workers != 2 {
		t.Fatalf("%d workers planned, want 2", workers)
	}
	defer func() {
		for range workers {
			k.preloadWorkerDone()
		}
	}()
	done := make(chan error, 1)
	go func() { done <- k.ApplyEndpoint(ep) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the apply waited for workers that never ran")
	}
	if got := sortedOps(f.take(), "Load "); !slices.Equal(got, []string{"Load egress:all", "Load ingress:web"}) {
		t.Errorf("loads %q, want each program once, by the apply", got)
	}
	if _, ok := b.next(); ok {
		t.Error("a job the apply loaded is still there for a worker")
	}
	if !strings.Contains(f.dump(), "link cali1 attached=tcx ready egress:all ingress:web nets=[10.0.0.1/32]") {
		t.Errorf("cali1 not programmed:\n%s", f.dump())
	}
}

// A link event while the apply waits (the interface went down and up: its
// routes went with it) makes the apply attach again and write the routes
// again, not trust the ones it wrote before the wait.
func TestApplyAfterLinkEventDuringPreload(t *testing.T) {
	f, k, ep := preloadGateSetup(t)
	ops := applyDuringPreload(t, f, k, ep, func() {
		k.mu.Lock()             // the fake's routes are written under it
		delete(f.nets, "cali1") // what a link going down does
		k.mu.Unlock()
		k.onLink(model.LinkUpdate{Name: "cali1", State: model.LinkDown})
		k.onLink(linkUp("cali1"))
	})
	if n := len(sortedOps(ops, "ConfigureEndpoint")); n != 1 {
		t.Errorf("routes written again %d times after the link event, want 1: %q", n, ops)
	}
	if !strings.Contains(f.dump(), "link cali1 attached=tcx ready egress:all ingress:web nets=[10.0.0.1/32]") {
		t.Errorf("cali1 not programmed:\n%s", f.dump())
	}
}

// preloadGateSetup is a kernel after its first apply with a fresh cali1
// and its endpoint, whose program loads block until applyDuringPreload
// lets them go.
func preloadGateSetup(t *testing.T) (*fakeKernel, *Kernel, *model.Endpoint) {
	t.Helper()
	f := newFakeKernel(t)
	k := f.kernel()
	if err := k.EndApply(); err != nil { // later interfaces are fresh
		t.Fatal(err)
	}
	f.addLink("cali1")
	k.onLink(linkUp("cali1"))
	return f, k, f.endpoint("cali1", 1, "web", "all")
}

// applyDuringPreload preloads ep's programs with their loads held back,
// applies ep once the workers have started both (so the apply has none of
// its own to load), waits for the apply to write its routes early and
// checks that it does not return, runs during (if any), lets the loads go
// and returns every operation once the apply has returned.
func applyDuringPreload(t *testing.T, f *fakeKernel, k *Kernel, ep *model.Endpoint, during func()) []string {
	t.Helper()
	gate := make(chan struct{})
	var started atomic.Int32
	f.loadHook = func(*model.DirectionPolicy) { started.Add(1); <-gate }
	f.take()
	k.PreloadPolicies([]*model.Endpoint{ep})
	testutil.WaitFor(t, 10*time.Second, "the workers start both loads", func() bool { return started.Load() == 2 })
	done := make(chan error, 1)
	go func() { done <- k.ApplyEndpoint(ep) }()
	var ops []string
	deadline := time.Now().Add(10 * time.Second)
	for !slices.ContainsFunc(ops, func(op string) bool { return strings.HasPrefix(op, "ConfigureNewEndpoint "+ep.Iface) }) {
		if time.Now().After(deadline) {
			close(gate)
			t.Fatalf("no routes while the programs loaded; operations: %q", ops)
		}
		ops = append(ops, f.take()...)
		runtime.Gosched()
	}
	select {
	case err := <-done:
		close(gate)
		t.Fatalf("the apply returned (%v) before its programs were loaded", err)
	default:
	}
	if during != nil {
		during()
	}
	close(gate)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the apply did not end once its programs were loaded")
	}
	return append(ops, f.take()...)
}
