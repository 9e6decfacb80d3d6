package nl

import (
	"context"
	"sync"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// reportQueue decouples the cache from the report callback. Run's
// goroutine drains the subscription into the cache and pushes the reports
// that causes; a goroutine of its own hands them to the callback. A slow
// callback (dataplane/linux fails interfaces closed under Kernel.mu, behind
// whole endpoint applies) therefore never stops the subscription from
// being read: when it did, the library's reader blocked on a full channel,
// the socket buffer filled, and a burst of link events ended the
// subscription with ENOBUFS.
//
// The queue keeps one pending state per name, the latest, so it is bounded
// by the number of interfaces whatever the burst. Consumers act on current
// state only: a name deleted and re-created before the callback sees it is
// reported once, with its new state, and the consumer finds the new
// ifindex itself (the engine's own link queue coalesces the same way).
type reportQueue struct {
	mu      sync.Mutex
	order   []string                   // names with a pending state, oldest first; guarded by mu
	pending map[string]model.LinkState // guarded by mu
	wake    chan struct{}              // capacity 1: something was pushed
}

func newReportQueue() *reportQueue {
	return &reportQueue{pending: map[string]model.LinkState{}, wake: make(chan struct{}, 1)}
}

// push queues ups, replacing the pending state of names already queued
// (which keep their place).
func (q *reportQueue) push(ups []model.LinkUpdate) {
	if len(ups) == 0 {
		return
	}
	q.mu.Lock()
	for _, u := range ups {
		if _, ok := q.pending[u.Name]; !ok {
			q.order = append(q.order, u.Name)
		}
		q.pending[u.Name] = u.State
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest pending update; ok is false when there is none.
func (q *reportQueue) pop() (u model.LinkUpdate, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return model.LinkUpdate{}, false
	}
	name := q.order[0]
	q.order = q.order[1:]
	if len(q.order) == 0 {
		q.order = nil // let the drained backing array go
	}
	st := q.pending[name]
	delete(q.pending, name)
	return model.LinkUpdate{Name: name, State: st}, true
}

// run hands pending updates to report, in order, until ctx ends. What is
// still pending then is dropped: a new Run reports every link afresh.
func (q *reportQueue) run(ctx context.Context, report func(model.LinkUpdate)) {
	for {
		for ctx.Err() == nil {
			u, ok := q.pop()
			if !ok {
				break
			}
			report(u)
		}
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
	}
}
