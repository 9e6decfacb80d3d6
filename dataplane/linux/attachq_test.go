package linux

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// blockAttach makes the fake's Attach of iface wait until release is
// closed; entered is closed when it starts waiting.
func blockAttach(f *fakeKernel, iface string) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.mu.Lock()
	f.attachHook = func(name string) {
		if name == iface {
			once.Do(func() { close(entered) })
			<-release
		}
	}
	f.mu.Unlock()
	return entered, release
}

// within runs do on another goroutine and fails the test if it has not
// returned by the deadline: it is blocked (the deadline only bounds a hang).
func within(t *testing.T, what string, do func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- do() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s is blocked behind the attach worker", what)
	}
}

// ops counts the fake's operations named name since the last take.
func countOps(ops []string, name string) int {
	n := 0
	for _, o := range ops {
		if strings.HasPrefix(o, name+" ") {
			n++
		}
	}
	return n
}

// While the attach worker is inside a slow attach (one that never returns
// until released), the engine's calls go on: another interface's
// ApplyEndpoint (which takes its queued attach over), EndApply, Inspect
// and the monitor's next report all complete. Once released, the worker's
// interface is failed closed, and its endpoint becomes ready without
// another attach.
func TestApplyNeverWaitsForTheAttachWorker(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	entered, release := blockAttach(f, "cali1")
	f.addLink("cali1")
	k.onLink(linkUp("cali1"))
	worker := make(chan struct{})
	go func() {
		defer close(worker)
		k.drainAttaches()
	}()
	<-entered // the worker attaches cali1 and holds no lock

	ep1, ep2 := f.endpoint("cali1", 1, "allow-web", "allow-all"), f.endpoint("cali2", 2, "allow-web", "allow-all")
	within(t, "the monitor's report of another interface", func() error {
		f.addLink("cali2")
		k.onLink(linkUp("cali2"))
		return nil
	})
	within(t, "ApplyEndpoint of another interface", func() error { return k.ApplyEndpoint(ep2) })
	within(t, "EndApply", k.EndApply)
	within(t, "Inspect", func() error {
		if _, ok := k.Endpoint("cali2"); !ok {
			return fmt.Errorf("cali2 not programmed")
		}
		return nil
	})
	if got := f.dump(); !strings.Contains(got, "link cali2 attached=tcx ready egress:allow-all ingress:allow-web") ||
		strings.Contains(got, "link cali1 attached") {
		t.Fatalf("while cali1's attach is blocked:\n%s", got)
	}

	close(release)
	<-worker
	ops := f.take()
	if n := countOps(ops, "Attach"); n != 2 {
		t.Errorf("%d attaches, want one per interface: %q", n, ops)
	}
	if got := f.dump(); !strings.Contains(got, "link cali1 attached=tcx closed\n") {
		t.Fatalf("cali1 after the worker's attach:\n%s", got)
	}
	if err := k.ApplyEndpoint(ep1); err != nil {
		t.Fatal(err)
	}
	if ops := f.take(); countOps(ops, "Attach") != 0 {
		t.Errorf("the endpoint of a failed-closed interface attached again: %q", ops)
	}
}

// ApplyEndpoint of an interface the worker is attaching waits for that
// attach and trusts it: one attach in all.
func TestApplyTakesTheWorkersAttach(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	entered, release := blockAttach(f, "cali1")
	f.addLink("cali1")
	k.onLink(linkUp("cali1"))
	worker := make(chan struct{})
	go func() {
		defer close(worker)
		k.drainAttaches()
	}()
	<-entered
	applied := make(chan error, 1)
	go func() { applied <- k.ApplyEndpoint(f.endpoint("cali1", 1, "allow-web", "allow-all")) }()
	close(release)
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	<-worker
	ops := f.take()
	if n := countOps(ops, "Attach"); n != 1 {
		t.Errorf("%d attaches of cali1, want 1: %q", n, ops)
	}
	if got := f.dump(); !strings.Contains(got, "link cali1 attached=tcx ready egress:allow-all ingress:allow-web") {
		t.Fatalf("cali1:\n%s", got)
	}
}

// The monitor's reports of one interface coalesce: the latest ifindex
// wins, and a report of an interface already failed closed queues nothing.
func TestAttachQueueLatestWins(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	f.addLink("cali1")
	k.onLink(linkUp("cali1"))
	f.delLink("cali1")
	f.addLink("cali1") // re-created before the worker got to it
	k.onLink(linkUp("cali1"))
	k.onLink(linkUp("cali1"))
	if n := k.PendingAttaches(); n != 1 {
		t.Fatalf("%d queued attaches, want 1", n)
	}
	k.drainAttaches()
	ops := f.take()
	if n := countOps(ops, "Attach"); n != 1 {
		t.Errorf("%d attaches, want 1 (of the latest ifindex): %q", n, ops)
	}
	k.onLink(linkUp("cali1"))
	if n := k.PendingAttaches(); n != 0 {
		t.Errorf("a failed-closed interface was queued again (%d)", n)
	}
	if got, want := f.dump(), "link cali1 attached=tcx closed\nlinkpin cali1\n"; got != want {
		t.Errorf("state:\n%swant:\n%s", got, want)
	}
}

// Counted on the fake, operation by operation: an endpoint on an interface
// that already carries dpd's entry programs (failed closed when it
// appeared, or left so by an earlier removal) becomes ready with map
// writes only, as do its updates; removing endpoints never detaches, their
// interfaces stay failed closed; and when the interfaces go, so does
// everything else, still without a detach.
func TestAttachAndDetachCounts(t *testing.T) {
	const n = 20
	f := newFakeKernel(t)
	k := f.kernel()
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	eps := make([]*model.Endpoint, n)
	for i := range n {
		name := fmt.Sprintf("cali%d", i)
		f.addLink(name)
		k.onLink(linkUp(name))
		eps[i] = f.endpoint(name, i+1, fmt.Sprintf("in-%d", i%3), "allow-all")
	}
	k.drainAttaches()
	if got := countOps(f.take(), "Attach"); got != n {
		t.Fatalf("the worker made %d attaches for %d interfaces", got, n)
	}
	attaches := func(what string, do func(ep *model.Endpoint) error) {
		t.Helper()
		before := k.Ops()
		for _, ep := range eps {
			if err := do(ep); err != nil {
				t.Fatalf("%s %s: %v", what, ep.Iface, err)
			}
		}
		ops := f.take()
		d := k.Ops().Sub(before)
		if a := countOps(ops, "Attach"); a != 0 || d.Attaches != 0 {
			t.Errorf("%s: %d attach calls (Ops %d), want none", what, a, d.Attaches)
		}
		if a := countOps(ops, "Detach"); a != 0 || d.Detaches != 0 {
			t.Errorf("%s: %d detach calls (Ops %d), want none", what, a, d.Detaches)
		}
	}
	attaches("first apply", k.ApplyEndpoint)
	attaches("policy update", func(ep *model.Endpoint) error {
		u := *ep
		u.Ingress = f.policy("updated")
		return k.ApplyEndpoint(&u)
	})
	attaches("update after a resync", func(ep *model.Endpoint) error {
		k.Resync()
		return k.ApplyEndpoint(ep)
	})
	attaches("removal", k.RemoveEndpoint)
	closed := f.dump()
	for i := range n {
		if want := fmt.Sprintf("link cali%d attached=tcx closed\n", i); !strings.Contains(closed, want) {
			t.Errorf("after removal, want %q in:\n%s", want, closed)
		}
	}
	if strings.Contains(closed, "nets=") || strings.Contains(closed, "jump ") || strings.Contains(closed, "prog ") {
		t.Errorf("removal left routes, jump slots or programs:\n%s", closed)
	}
	attaches("re-add after removal", k.ApplyEndpoint)
	attaches("removal again", k.RemoveEndpoint)
	attaches("collection", func(*model.Endpoint) error { _, err := k.CollectGarbage(); return err })
	attaches("interfaces deleted", func(ep *model.Endpoint) error {
		f.delLink(ep.Iface)
		k.onLink(model.LinkUpdate{Name: ep.Iface, State: model.LinkAbsent})
		_, err := k.CollectGarbage()
		return err
	})
	if got := f.dump(); got != "\n" {
		t.Errorf("after the interfaces went:\n%s", got)
	}
}

// The same counts on the real kernel: an interface failed closed by the
// attach worker becomes up without an attach, and its removal makes no
// detach (the kernel's own detach counter agrees); the interface then
// drops, keeping dpd's entry programs and their link pins.
func TestAttachWorkerRealKernel(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	watch(t, k)
	peer := newWorkload(t, "10.77.8.1")
	mustApply(t, k, allowAllEndpoint(peer, 1))
	w := newWorkload(t, "10.77.8.2")
	ifindex := waitClosed(t, k, w)

	before, costs := k.Ops(), k.datapath().ObservedCosts()
	ep := allowAllEndpoint(w, 2)
	mustNil(t, applyKnown(t, k, ep))
	if d := k.Ops().Sub(before); d.Attaches != 0 || k.datapath().ObservedCosts().TCXAttach.Count != costs.TCXAttach.Count {
		t.Errorf("the endpoint of a failed-closed interface attached: %+v", d)
	}
	testutil.WaitFor(t, 5*time.Second, "peer pings w", func() bool { return pingsQuick(peer, w.IP) })

	mustNil(t, k.RemoveEndpoint(ep))
	if d := k.Ops().Sub(before); d.Detaches != 0 || k.datapath().ObservedCosts().Detach.Count != costs.Detach.Count {
		t.Errorf("removal detached: %+v", d)
	}
	if ok, ready := ifState(t, k, ifindex); !ok || ready {
		t.Errorf("after removal ifstate present %v ready %v, want failed closed", ok, ready)
	}
	if n := entryProgs(t, ifindex); n != 2 {
		t.Errorf("after removal %d programs attached, want dpd's 2 entry programs", n)
	}
	if pingsQuick(peer, w.IP) || pingsQuick(w, peer.IP) {
		t.Error("the removed endpoint's interface passes traffic")
	}
	// Back again: map writes only.
	before = k.Ops()
	mustNil(t, applyKnown(t, k, ep))
	if d := k.Ops().Sub(before); d.Attaches != 0 {
		t.Errorf("re-adding the endpoint attached: %+v", d)
	}
	testutil.WaitFor(t, 5*time.Second, "peer pings w again", func() bool { return pingsQuick(peer, w.IP) })
}

// The queue hands each queued name out once, oldest first, at its latest
// ifindex: a name an apply took over and the monitor queued again comes
// once, and one being attached waits.
func TestAttachQueueOrder(t *testing.T) {
	q := newAttachQueue()
	q.put("a", 1)
	q.put("b", 2)
	q.put("c", 3)
	q.take("a")
	q.put("a", 4) // again after the take: handed out once
	q.put("b", 5) // the latest ifindex wins, in its old place
	q.running["c"] = true
	var got []string
	for {
		name, ifindex, ok := q.next()
		if !ok {
			break
		}
		got = append(got, fmt.Sprintf("%s=%d", name, ifindex))
	}
	if want := []string{"a=4", "b=5"}; !slices.Equal(got, want) {
		t.Errorf("handed out %q, want %q", got, want)
	}
	delete(q.running, "c")
	if name, ifindex, ok := q.next(); !ok || name != "c" || ifindex != 3 {
		t.Errorf("after its attach ended: %q %d %v, want c 3", name, ifindex, ok)
	}
	if _, _, ok := q.next(); ok || len(q.order) != 0 {
		t.Errorf("queue not empty: %q", q.order)
	}
}
