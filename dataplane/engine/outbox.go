package engine

import (
	"errors"
	"fmt"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// ErrControllerBehind ends a session whose reader left more statuses
// unread than Options.MaxPendingStatuses. The controller resyncs with a
// new session, which gets a full report.
var ErrControllerBehind = errors.New("controller fell behind on its statuses")

// outbox holds a session's statuses not yet handed to its reader. Only the
// latest status of a subject is worth sending, so a newer one replaces an
// unsent older one and takes its place at the back: each subject keeps the
// order of its statuses, the last one the reader sees is the engine's, and
// the queue holds at most one status per subject. Happy reports merge
// (mergeHappy) so that what the reader applies still adds up to the
// engine's happy set.
type outbox struct {
	items []Status          // nil: superseded
	base  int               // position of items[0]
	head  int               // index in items of the next to pop
	live  int               // non-nil entries
	at    map[statusKey]int // position of the pending status per subject
}

// push queues m and reports whether it superseded a pending status.
func (q *outbox) push(m Status) (coalesced bool) {
	if q.at == nil {
		q.at = map[statusKey]int{}
	}
	k := m.key()
	if pos, ok := q.at[k]; ok {
		i := pos - q.base
		if old, ok := q.items[i].(*HappyReport); ok {
			m = mergeHappy(old, m.(*HappyReport))
		}
		q.items[i] = nil
		q.live--
		coalesced = true
	}
	q.at[k] = q.base + len(q.items)
	q.items = append(q.items, m)
	q.live++
	return coalesced
}

// pop takes the oldest pending status.
func (q *outbox) pop() (Status, bool) {
	for q.head < len(q.items) {
		m := q.items[q.head]
		q.items[q.head] = nil
		q.head++
		if m == nil {
			continue
		}
		q.live--
		delete(q.at, m.key())
		q.compact()
		return m, true
	}
	q.compact()
	return nil, false
}

// compact drops the popped prefix once it is at least half the slice.
func (q *outbox) compact() {
	if q.head == 0 || q.head < len(q.items)/2 {
		return
	}
	n := copy(q.items, q.items[q.head:])
	clear(q.items[n:])
	q.items = q.items[:n]
	q.base += q.head
	q.head = 0
}

// mergeHappy is one report with the effect of old followed by next: a
// reader that missed old and applies the result ends with the same set.
func mergeHappy(old, next *HappyReport) *HappyReport {
	if next.Full {
		return next
	}
	m := &HappyReport{Full: old.Full, Happy: next.Happy, Dirty: next.Dirty, Errored: next.Errored}
	added := make(map[model.WorkloadID]struct{}, len(old.Added)+len(next.Added))
	removed := map[model.WorkloadID]struct{}{}
	for _, id := range old.Added {
		added[id] = struct{}{}
	}
	if !old.Full {
		for _, id := range old.Removed {
			removed[id] = struct{}{}
		}
	}
	for _, id := range next.Removed {
		delete(added, id)
		if !old.Full { // a full report lists only what is happy
			removed[id] = struct{}{}
		}
	}
	for _, id := range next.Added {
		delete(removed, id)
		added[id] = struct{}{}
	}
	m.Added = sortedIDs(added)
	if len(removed) > 0 {
		m.Removed = sortedIDs(removed)
	}
	return m
}

// enqueueOut queues m for the reader; dropped once closed. A reader that
// stays behind past limit pending statuses ends the session with
// ErrControllerBehind.
func (s *session) enqueueOut(m Status, limit int) {
	if s.isClosed() {
		return
	}
	s.mu.Lock()
	if s.queue.push(m) {
		s.e.met.statusCoalesced.Inc()
	}
	pending := s.queue.live
	s.mu.Unlock()
	s.e.met.statusPending.Set(float64(pending))
	if pending > limit {
		s.fail(fmt.Errorf("%w: %d statuses unread, more than its %d", ErrControllerBehind, pending, limit))
		return
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// fail ends the session with err, which Err reports from then on.
func (s *session) fail(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
	s.e.met.controllerBehind.Inc()
	s.e.log.Warn("ending controller session", "session", s.id, "peer", s.peer, "reason", err)
	s.Close()
	s.e.met.statusPending.Set(0)
}

// Err reports why the engine ended the session (nil: it did not).
func (s *session) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Done is closed when the session ends.
func (s *session) Done() <-chan struct{} { return s.done }

func (s *session) pump() {
	defer close(s.pumpDone)
	defer close(s.out)
	for {
		s.mu.Lock()
		m, ok := s.queue.pop()
		if ok {
			s.popped++
		}
		pending := s.queue.live
		s.mu.Unlock()
		if !ok {
			select {
			case <-s.notify:
				continue
			case <-s.done:
				return
			}
		}
		s.e.met.statusPending.Set(float64(pending))
		select {
		case s.out <- m:
			s.mu.Lock()
			s.sent++
			s.mu.Unlock()
		case <-s.done:
			return
		}
	}
}

// drained reports whether the reader has taken every status queued so
// far, and how many it took.
func (s *session) drained() (bool, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue.live == 0 && s.popped == s.sent, s.sent
}
