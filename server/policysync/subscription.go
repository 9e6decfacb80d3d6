package policysync

import (
	"context"
	"errors"
	"sync"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Why a subscription ended.
var (
	ErrSuperseded      = errors.New("superseded by a newer connection of the same workload")
	ErrEndpointRemoved = errors.New("the workload endpoint was removed")
	ErrTooSlow         = errors.New("client too slow: its queue overflowed; reconnect for a full sync")
	ErrClosed          = errors.New("policy sync stopped")
)

// Subscription is one client's stream of its workload's subset. Its queue
// is bounded: a client that falls that far behind is disconnected and gets
// a full sync when it reconnects, so the controller is never held up.
type Subscription struct {
	p      *Processor
	id     model.WorkloadID
	notify chan struct{} // cap 1: the queue grew or the subscription ended
	limit  int

	mu    sync.Mutex
	queue []*felix.ToDataplane // guarded by mu
	err   error                // guarded by mu; set once the subscription ended
}

func newSubscription(p *Processor, id model.WorkloadID, limit int) *Subscription {
	return &Subscription{p: p, id: id, notify: make(chan struct{}, 1), limit: limit}
}

// ID is the workload endpoint the subscription is for.
func (s *Subscription) ID() model.WorkloadID { return s.id }

// pushLocked queues m; the processor holds its lock, which orders pushes.
// It reports false when the queue overflowed and the subscription ended.
func (s *Subscription) pushLocked(m *felix.ToDataplane) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	if len(s.queue) >= s.limit {
		s.queue, s.err = nil, ErrTooSlow
		s.mu.Unlock()
		s.wake()
		return false
	}
	s.queue = append(s.queue, m)
	s.mu.Unlock()
	s.wake()
	return true
}

// end stops the subscription; messages already queued are still read.
func (s *Subscription) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next returns the next message, blocking until there is one. Once the
// subscription ended and its queue is drained it returns why it ended.
func (s *Subscription) Next(ctx context.Context) (*felix.ToDataplane, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			m := s.queue[0]
			s.queue[0] = nil
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return m, nil
		}
		err := s.err
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Err reports why the subscription ended (nil while it runs).
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Leave ends the subscription and detaches it from its workload.
func (s *Subscription) Leave() {
	s.end(ErrClosed)
	s.p.leave(s)
}
