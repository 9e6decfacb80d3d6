package flowhist

import (
	"sync"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ev(i int) model.FlowEvent {
	return model.FlowEvent{Time: t0.Add(time.Duration(i) * time.Second), Ifindex: i}
}

func ifindexes(evs []model.FlowEvent) []int {
	out := make([]int, len(evs))
	for i, e := range evs {
		out[i] = e.Ifindex
	}
	return out
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestHistoryKeepsTheNewest(t *testing.T) {
	h := New(3)
	for i := 1; i <= 5; i++ {
		h.Add(ev(i))
	}
	got := h.Since(time.Time{}, 0)
	if !equal(ifindexes(got), []int{3, 4, 5}) {
		t.Fatalf("held %v, want [3 4 5]", ifindexes(got))
	}
	if got[0].Seq != 3 || got[2].Seq != 5 {
		t.Fatalf("seqs %d..%d, want 3..5", got[0].Seq, got[2].Seq)
	}
	if got := h.Since(t0.Add(4*time.Second), 0); !equal(ifindexes(got), []int{4, 5}) {
		t.Fatalf("since 4s: %v", ifindexes(got))
	}
	if got := h.Since(time.Time{}, 1); !equal(ifindexes(got), []int{5}) {
		t.Fatalf("last 1: %v", ifindexes(got))
	}
	if held, capacity, _, _ := h.Stats(); held != 3 || capacity != 3 {
		t.Fatalf("stats %d/%d", held, capacity)
	}
}

func TestSubscribeMissesNothingBetweenBacklogAndLive(t *testing.T) {
	h := New(100)
	h.Add(ev(1))
	backlog, s := h.Subscribe(time.Time{}, 0, 10)
	defer s.Close()
	h.Add(ev(2))
	if !equal(ifindexes(backlog), []int{1}) {
		t.Fatalf("backlog %v", ifindexes(backlog))
	}
	if got := <-s.Events(); got.Ifindex != 2 || got.Lost != 0 {
		t.Fatalf("live %+v", got)
	}
}

func TestSlowSubscriberLosesCountedAndIsTold(t *testing.T) {
	h := New(100)
	_, slow := h.Subscribe(time.Time{}, 0, 2)
	defer slow.Close()
	_, fast := h.Subscribe(time.Time{}, 0, 100)
	defer fast.Close()
	for i := 1; i <= 5; i++ {
		h.Add(ev(i))
	}
	// slow took 1 and 2, lost 3..5.
	if a, b := <-slow.Events(), <-slow.Events(); a.Ifindex != 1 || b.Ifindex != 2 {
		t.Fatalf("slow got %d, %d", a.Ifindex, b.Ifindex)
	}
	if slow.Lost() != 3 {
		t.Fatalf("slow lost %d, want 3", slow.Lost())
	}
	h.Add(ev(6))
	if got := <-slow.Events(); got.Ifindex != 6 || got.Lost != 3 {
		t.Fatalf("after the loss: %+v, want event 6 telling 3 lost", got)
	}
	for i := 1; i <= 6; i++ {
		if got := <-fast.Events(); got.Ifindex != i || got.Lost != 0 {
			t.Fatalf("fast subscriber event %d: %+v", i, got)
		}
	}
	if _, _, subs, lost := h.Stats(); subs != 2 || lost != 3 {
		t.Fatalf("stats: %d subscribers, %d lost", subs, lost)
	}
}

func TestCloseEndsSubscriptions(t *testing.T) {
	h := New(10)
	_, a := h.Subscribe(time.Time{}, 0, 1)
	_, b := h.Subscribe(time.Time{}, 0, 1)
	a.Close()
	a.Close() // twice is fine
	if _, ok := <-a.Events(); ok {
		t.Fatal("closed subscription delivered")
	}
	h.Close()
	if _, ok := <-b.Events(); ok {
		t.Fatal("history close left the subscription open")
	}
	b.Close()
	h.Add(ev(1))
	if got := h.Since(time.Time{}, 0); len(got) != 0 {
		t.Fatalf("closed history took an event: %v", got)
	}
	_, c := h.Subscribe(time.Time{}, 0, 1)
	if _, ok := <-c.Events(); ok {
		t.Fatal("subscription to a closed history is open")
	}
}

// TestConcurrentSubscribers runs adders and subscribers at once (for the
// race detector): every subscriber sees increasing sequence numbers and
// accounts for every event as delivered or lost.
func TestConcurrentSubscribers(t *testing.T) {
	h := New(50)
	const events = 2000
	var wg sync.WaitGroup
	for range 4 {
		_, s := h.Subscribe(time.Time{}, 0, 8)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last, got, lost uint64
			for e := range s.Events() {
				if e.Seq <= last {
					t.Errorf("seq %d after %d", e.Seq, last)
				}
				last = e.Seq
				got++
				lost += e.Lost
			}
			if total := got + lost + pendingOf(h, s); total != events {
				t.Errorf("delivered %d + lost %d (pending included) = %d, want %d", got, lost, total, events)
			}
		}()
	}
	for i := range events {
		h.Add(ev(i))
	}
	h.Close()
	wg.Wait()
}

func pendingOf(h *History, s *Subscription) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return s.pending
}
