// Package flowhist keeps the recent flow events of a dataplane: a bounded
// ring of the last N events and any number of live subscribers, each with a
// bounded buffer. Adding never blocks: a subscriber whose buffer is full
// loses the event, which is counted and reported on the next event it does
// get, so one slow reader never slows the dataplane or another reader.
package flowhist

import (
	"sync"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// DefaultCapacity is the history's size when none is given.
const DefaultCapacity = 10000

// DefaultBuffer is a subscriber's buffer when none is given.
const DefaultBuffer = 1024

// History is safe for concurrent use.
type History struct {
	mu     sync.Mutex
	ring   []model.FlowEvent // ring[(start+i)%cap] is the i-th oldest
	start  int
	n      int
	seq    uint64
	subs   map[*Subscription]struct{}
	lost   uint64 // by every subscriber, in total
	closed bool
}

// New returns a history of the last capacity events (DefaultCapacity if
// capacity <= 0).
func New(capacity int) *History {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &History{ring: make([]model.FlowEvent, capacity), subs: map[*Subscription]struct{}{}}
}

// Add records ev (its Seq is assigned here) and offers it to every
// subscriber without waiting.
func (h *History) Add(ev model.FlowEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.seq++
	ev.Seq, ev.Lost = h.seq, 0
	if h.n < len(h.ring) {
		h.ring[(h.start+h.n)%len(h.ring)] = ev
		h.n++
	} else {
		h.ring[h.start] = ev
		h.start = (h.start + 1) % len(h.ring)
	}
	for s := range h.subs {
		out := ev
		out.Lost = s.pending
		select {
		case s.c <- out:
			s.pending = 0
		default:
			s.pending++
			s.lost++
			h.lost++
		}
	}
}

// Since returns the held events at or after since (all for the zero
// time), oldest first, at most the newest last of them when last > 0.
func (h *History) Since(since time.Time, last int) []model.FlowEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sinceLocked(since, last)
}

func (h *History) sinceLocked(since time.Time, last int) []model.FlowEvent {
	first := 0
	if !since.IsZero() {
		// Times only grow in practice, but a reader must not depend on it
		// (clock steps): scan rather than search.
		for first < h.n && h.ring[(h.start+first)%len(h.ring)].Time.Before(since) {
			first++
		}
	}
	if last > 0 && h.n-first > last {
		first = h.n - last
	}
	out := make([]model.FlowEvent, 0, h.n-first)
	for i := first; i < h.n; i++ {
		ev := h.ring[(h.start+i)%len(h.ring)]
		if !since.IsZero() && ev.Time.Before(since) {
			continue
		}
		out = append(out, ev)
	}
	return out
}

// Subscribe returns the held events as Since does and a subscription to
// every later one: nothing between the two is missed or repeated. buffer
// bounds the events waiting for the subscriber (DefaultBuffer if <= 0).
// The caller closes the subscription.
func (h *History) Subscribe(since time.Time, last, buffer int) ([]model.FlowEvent, *Subscription) {
	if buffer <= 0 {
		buffer = DefaultBuffer
	}
	s := &Subscription{h: h, c: make(chan model.FlowEvent, buffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	backlog := h.sinceLocked(since, last)
	if h.closed {
		close(s.c)
		s.done = true
		return backlog, s
	}
	h.subs[s] = struct{}{}
	return backlog, s
}

// Stats reports the held events and the subscribers.
func (h *History) Stats() (held, capacity, subscribers int, lost uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n, len(h.ring), len(h.subs), h.lost
}

// Close ends every subscription (their channels close) and refuses new
// events; the held events stay readable.
func (h *History) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for s := range h.subs {
		s.done = true
		close(s.c)
	}
	h.subs = map[*Subscription]struct{}{}
}

// Subscription receives the events added after it was made.
type Subscription struct {
	h       *History
	c       chan model.FlowEvent
	pending uint64 // lost since the last delivered event; guarded by h.mu
	lost    uint64 // in total; guarded by h.mu
	done    bool   // c is closed; guarded by h.mu
}

// Events delivers the events; it is closed when the subscription or the
// history is closed. An event's Lost says how many were missed before it.
func (s *Subscription) Events() <-chan model.FlowEvent { return s.c }

// Lost counts the events this subscriber missed.
func (s *Subscription) Lost() uint64 {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.lost
}

// Close ends the subscription. Safe to call more than once.
func (s *Subscription) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.done {
		return
	}
	s.done = true
	delete(s.h.subs, s)
	close(s.c)
}
