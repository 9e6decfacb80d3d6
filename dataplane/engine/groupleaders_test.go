package engine

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// callLog is the memory kernel recording, in order, each preload (the
// endpoints it was handed) and each endpoint applied.
type callLog struct {
	*memkernel.Kernel
	mu    sync.Mutex
	calls []string
	// ipsetGate holds an UpdateIPSet, so a test can queue several messages
	// while the engine is inside a pass and have the next pass take them
	// together.
	ipsetGate callGate
}

func (k *callLog) UpdateIPSet(id string, added, removed []model.IPSetMember) error {
	k.ipsetGate.pass()
	return k.Kernel.UpdateIPSet(id, added, removed)
}

// callGate holds the next call that passes it, once armed, until released.
type callGate struct {
	mu               sync.Mutex
	entered, release chan struct{}
}

// arm makes the next pass wait; entered is closed when a call has reached
// the gate, and release (safe to call more than once) lets it go on.
func (g *callGate) arm() (entered <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	rel := g.release
	return g.entered, sync.OnceFunc(func() { close(rel) })
}

// pass is called by the gated method: it waits when the gate is armed.
func (g *callGate) pass() {
	g.mu.Lock()
	entered, release := g.entered, g.release
	g.entered, g.release = nil, nil
	g.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
}

func (k *callLog) PreloadPolicies(eps []*model.Endpoint) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, fmt.Sprintf("preload %d", len(eps)))
}

func (k *callLog) ApplyEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	k.calls = append(k.calls, "apply "+ep.ID.Workload)
	k.mu.Unlock()
	return k.Kernel.ApplyEndpoint(ep)
}

func (k *callLog) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := k.calls
	k.calls = nil
	return out
}

// TestGroupLeadersApplyFirst: a change of a policy two groups of
// programmed endpoints share is preloaded and applied for one member of
// each group before any other member is resolved or applied, so each
// group's shared slot switches first; endpoints new in the pass, and
// cold starts, keep the plain order.
func TestGroupLeadersApplyFirst(t *testing.T) {
	h, k := newWrappedHarness(t, func(m *memkernel.Kernel) *callLog { return &callLog{Kernel: m} })
	h.session()
	h.send(ipset("s:0", "10.1.0.1"), policy("shared", allowFrom("s:0"), denyPort(1)), policy("other", denyPort(2)),
		profile("kns.default", allowFrom()),
		wep("a1", "10.65.0.1", []string{"shared"}, "kns.default"), wep("a2", "10.65.0.2", []string{"shared"}, "kns.default"),
		wep("a3", "10.65.0.3", []string{"shared"}, "kns.default"),
		wep("b1", "10.65.0.4", []string{"shared", "other"}, "kns.default"), wep("b2", "10.65.0.5", []string{"shared", "other"}, "kns.default"),
		wep("c1", "10.65.0.6", []string{"other"}, "kns.default"), inSync())
	if got := fmt.Sprint(k.take()); got != "[preload 6 apply a1 apply a2 apply a3 apply b1 apply b2 apply c1]" {
		t.Fatalf("cold start: %s, want one preload, then every endpoint in order", got)
	}
	h.send(policy("shared", allowFrom("s:0"), denyPort(3)))
	want := "[preload 2 apply a1 apply b1 preload 3 apply a2 apply a3 apply b2]"
	if got := fmt.Sprint(k.take()); got != want {
		t.Fatalf("after the shared policy changed: %s, want %s", got, want)
	}
	// A new member of a group follows its leader; a lone endpoint leads
	// nothing.
	h.sendInOnePass(k, wep("a4", "10.65.0.7", []string{"shared"}, "kns.default"), policy("shared", allowFrom("s:0"), denyPort(4)))
	want = "[preload 2 apply a1 apply b1 preload 4 apply a2 apply a3 apply a4 apply b2]"
	if got := fmt.Sprint(k.take()); got != want {
		t.Fatalf("with a new member: %s, want %s", got, want)
	}
	h.send(policy("other", denyPort(5)))
	want = "[preload 1 apply b1 preload 2 apply b2 apply c1]"
	if got := fmt.Sprint(k.take()); got != want {
		t.Fatalf("after the other policy changed: %s, want %s", got, want)
	}
}

// sendInOnePass queues msgs while the engine is held inside a pass (an IP
// set delta, which applies no endpoint), so that the next pass drains
// them all: submitted one by one they could otherwise be split.
func (h *harness) sendInOnePass(k *callLog, msgs ...*felix.ToDataplane) {
	h.t.Helper()
	entered, release := k.ipsetGate.arm()
	if err := h.sess.Submit(h.ctx, tr(h.t, ipsetDelta("s:0", []string{"10.1.0.9"}, nil))); err != nil {
		h.t.Fatalf("submit: %v", err)
	}
	select {
	case <-entered:
	case <-time.After(waitTimeout):
		release()
		h.t.Fatal("the engine never applied the IP set delta")
	}
	for _, m := range msgs {
		if err := h.sess.Submit(h.ctx, tr(h.t, m)); err != nil {
			release()
			h.t.Fatalf("submit: %v", err)
		}
	}
	release()
	h.flush()
}

// TestPreloadWhenInterfaceAppears: an endpoint whose update came before
// its interface is applied again once the interface is up, and its
// programs are handed to the preload for that pass, not loaded one after
// the other inside ApplyEndpoint.
func TestPreloadWhenInterfaceAppears(t *testing.T) {
	h, k := newWrappedHarness(t, func(m *memkernel.Kernel) *callLog { return &callLog{Kernel: m} })
	s := h.session()
	h.k.SetLink("calia", model.LinkAbsent)
	h.send(policy("p", denyPort(1)), profile("kns.default", allowFrom()), wep("a", "10.65.0.1", []string{"p"}, "kns.default"), inSync())
	if got := fmt.Sprint(k.take()); got != "[preload 1 apply a]" {
		t.Fatalf("before the interface: %s, want one preload and the apply that records the endpoint", got)
	}
	h.k.SetLink("calia", model.LinkUp)
	s.waitFor(t, "up", func(m []Status) bool { return reflect.DeepEqual(statuses(m, "a"), []string{statusDown, statusUp}) })
	if got := fmt.Sprint(k.take()); got != "[preload 1 apply a]" {
		t.Fatalf("once the interface is up: %s, want the endpoint preloaded, then applied", got)
	}
	// A link event that changes nothing to apply preloads nothing.
	h.k.SetLink("calia", model.LinkDown)
	s.waitFor(t, "down", func(m []Status) bool {
		return reflect.DeepEqual(statuses(m, "a"), []string{statusDown, statusUp, statusDown})
	})
	if got := fmt.Sprint(k.take()); got != "[]" {
		t.Fatalf("after the link went down: %s, want no preload and no apply", got)
	}
}
