package engine

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// metric reads a counter or gauge from reg.
func metric(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func widN(i int) model.WorkloadID {
	return model.WorkloadID{Orchestrator: "k8s", Workload: fmt.Sprintf("w%d", i), Endpoint: "eth0"}
}

// TestOutboxCoalescesInOrder: random pushes and pops of statuses for a few
// endpoints. The queue never holds two statuses of one endpoint, each
// endpoint's statuses come out in the order they went in, and the last one
// out is the last one in.
func TestOutboxCoalescesInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		var q outbox
		const subjects = 5
		pushed := map[model.WorkloadID]int{} // last sequence pushed
		seen := map[model.WorkloadID]int{}   // last sequence popped
		pop := func() {
			m, ok := q.pop()
			if !ok {
				return
			}
			u := m.(*WorkloadStatus)
			var n int
			fmt.Sscanf(u.Status, "%d", &n)
			if n <= seen[u.ID] {
				t.Fatalf("%s: status %d after %d", u.ID, n, seen[u.ID])
			}
			seen[u.ID] = n
		}
		for i := 1; i <= 500; i++ {
			id := widN(rng.IntN(subjects))
			q.push(&WorkloadStatus{ID: id, Status: fmt.Sprint(i)})
			pushed[id] = i
			if q.live > subjects {
				t.Fatalf("%d pending for %d endpoints", q.live, subjects)
			}
			if rng.IntN(3) == 0 {
				pop()
			}
		}
		for q.live > 0 {
			pop()
		}
		if _, ok := q.pop(); ok {
			t.Fatal("pop after the last status")
		}
		if !maps.Equal(seen, pushed) {
			t.Fatalf("last statuses seen %v, want %v", seen, pushed)
		}
	}
}

// TestOutboxHappyReportsAddUp: the engine's full report and deltas, with a
// reader that takes them at random moments: whatever merged, applying
// what came out yields the engine's happy set, and no report names an
// endpoint as both added and removed.
func TestOutboxHappyReportsAddUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 100; round++ {
		var q outbox
		engineSet := map[model.WorkloadID]struct{}{}
		reader := map[model.WorkloadID]struct{}{}
		take := func() {
			m, ok := q.pop()
			if !ok {
				return
			}
			r := m.(*HappyReport)
			if r.Full {
				clear(reader)
			}
			in := map[model.WorkloadID]bool{}
			for _, id := range r.Removed {
				in[id] = true
				delete(reader, id)
			}
			for _, id := range r.Added {
				if in[id] {
					t.Fatalf("%s both added and removed in %+v", id, r)
				}
				reader[id] = struct{}{}
			}
		}
		first := true
		for step := 0; step < 40; step++ {
			if first || rng.IntN(15) == 0 { // a full report (a new session's)
				first = false
				for i := 0; i < 8; i++ {
					if rng.IntN(2) == 0 {
						engineSet[widN(i)] = struct{}{}
					} else {
						delete(engineSet, widN(i))
					}
				}
				q.push(&HappyReport{Full: true, Added: sortedIDs(engineSet), Happy: len(engineSet)})
			} else {
				var added, removed []model.WorkloadID
				for i := 0; i < 8; i++ {
					if rng.IntN(4) != 0 {
						continue
					}
					if _, ok := engineSet[widN(i)]; ok {
						delete(engineSet, widN(i))
						removed = append(removed, widN(i))
					} else {
						engineSet[widN(i)] = struct{}{}
						added = append(added, widN(i))
					}
				}
				if len(added)+len(removed) > 0 {
					q.push(&HappyReport{Added: added, Removed: removed, Happy: len(engineSet)})
				}
			}
			if q.live > 1 {
				t.Fatalf("%d happy reports pending", q.live)
			}
			if rng.IntN(3) == 0 {
				take()
			}
		}
		take()
		if !maps.Equal(reader, engineSet) {
			t.Fatalf("round %d: reader's happy set %v, engine's %v", round, sortedIDs(reader), sortedIDs(engineSet))
		}
	}
}

// TestSlowControllerBounded: a controller that reads nothing while every
// endpoint's interface flaps. What waits for it stays at one status per
// endpoint plus the happy report and DataplaneInSync; once it reads, the
// last status of each endpoint is the engine's and its happy set is the
// engine's.
func TestSlowControllerBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, func(o *Options) { o.Registry = reg })
	const n, flaps = 40, 25
	s := h.e.NewSession("slow").(*session)
	var msgs []*felix.ToDataplane
	for i := 0; i < n; i++ {
		msgs = append(msgs, wep(fmt.Sprint(i), fmt.Sprintf("10.65.0.%d", i+1), nil))
	}
	for _, m := range append(msgs, inSync()) {
		if err := submitFelix(h.ctx, s, m); err != nil {
			t.Fatal(err)
		}
	}
	h.flush()
	maxPending := 0
	for f := 0; f < flaps; f++ {
		for i := 0; i < n; i++ {
			state := model.LinkDown
			if (f+i)%2 == 1 {
				state = model.LinkUp
			}
			h.k.SetLink(fmt.Sprintf("cali%d", i), state)
		}
		h.flush()
		s.mu.Lock()
		maxPending = max(maxPending, s.queue.live)
		s.mu.Unlock()
	}
	if bound := n + 2; maxPending > bound {
		t.Fatalf("%d statuses pending for a reader that reads nothing, want at most %d (one per endpoint, happy, in-sync)", maxPending, bound)
	}
	if c := metric(t, reg, "dpd_status_coalesced_total"); c < float64(n*(flaps-2)) {
		t.Fatalf("%v statuses coalesced, want at least %d", c, n*(flaps-2))
	}
	if s.isClosed() {
		t.Fatalf("session ended below the cap: %v", s.Err())
	}

	// The controller reads now.
	seen := map[string]string{}
	happy := map[model.WorkloadID]struct{}{}
	inSyncs := 0
	agree := func() bool {
		for {
			select {
			case m := <-s.Out():
				switch m := m.(type) {
				case *WorkloadStatus:
					seen[m.ID.String()] = m.Status
				case *HappyReport:
					if m.Full {
						clear(happy)
					}
					for _, id := range m.Removed {
						delete(happy, id)
					}
					for _, id := range m.Added {
						happy[id] = struct{}{}
					}
				case *DataplaneInSync:
					inSyncs++
				}
				continue
			default:
			}
			break
		}
		want := map[string]string{}
		up := 0
		for _, info := range h.e.Endpoints() {
			want[info.ID.String()] = info.Status
			if info.Status == statusUp {
				up++
				if _, ok := happy[info.ID]; !ok {
					return false
				}
			}
		}
		return maps.Equal(seen, want) && len(happy) == up && inSyncs == 1
	}
	testutil.WaitFor(t, waitTimeout, "the reader's view to equal the engine's", agree)
}

// TestSlowControllerCutOff: a controller that reads nothing while
// endpoints come and go past the cap is ended with ErrControllerBehind
// and counted; a new session resyncs and sees every endpoint.
func TestSlowControllerCutOff(t *testing.T) {
	const limit = 20
	reg := prometheus.NewRegistry()
	h := newHarness(t, func(o *Options) { o.MaxPendingStatuses, o.Registry = limit, reg })
	s := h.e.NewSession("slow").(*session)
	if err := submitFelix(h.ctx, s, inSync()); err != nil {
		t.Fatal(err)
	}
	h.flush()
	// Pods come and go: each leaves a removal unread.
	var snap []*felix.ToDataplane
	var live string
	churned := 0
	for i := 0; i < 2*limit && !s.isClosed(); i++ {
		m := wep(fmt.Sprint(i), fmt.Sprintf("10.65.0.%d", i+1), nil)
		snap, live = []*felix.ToDataplane{m}, fmt.Sprint(i)
		for _, m := range []*felix.ToDataplane{m, wepRemove(fmt.Sprint(i - 1))} {
			if err := submitFelix(h.ctx, s, m); err != nil && !errors.Is(err, ErrSessionClosed) {
				t.Fatal(err)
			}
		}
		h.flush()
		churned++
	}
	select {
	case <-s.Done():
	default:
		t.Fatalf("session still open after %d endpoints came and went, cap %d", churned, limit)
	}
	if churned < limit {
		t.Fatalf("session ended after %d endpoints came and went, below the cap of %d", churned, limit)
	}
	if err := s.Err(); !errors.Is(err, ErrControllerBehind) {
		t.Fatalf("Err() = %v, want ErrControllerBehind", err)
	}
	if n := metric(t, reg, "dpd_controller_behind_total"); n != 1 {
		t.Fatalf("dpd_controller_behind_total = %v, want 1", n)
	}
	for range s.Out() { // closed, whatever was in flight
	}

	c := h.session()
	h.send(append(snap, inSync())...)
	got := c.waitFor(t, "the live endpoint up in the new session", func(m []Status) bool {
		st := statuses(m, live)
		return len(st) > 0 && st[len(st)-1] == statusUp && count(m, isInSync) == 1
	})
	if c.Err() != nil || c.isClosed() {
		t.Fatalf("new session ended: %v (%d statuses)", c.Err(), len(got))
	}
}
