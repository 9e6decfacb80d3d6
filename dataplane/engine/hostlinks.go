package engine

import (
	"context"
	"sync"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// hostLinkQueue holds host interface changes not yet seen by the loop,
// the latest per interface (bounded by the node's interfaces).
type hostLinkQueue struct {
	mu      sync.Mutex
	pending map[string]model.HostLinkUpdate // guarded by mu
}

func (q *hostLinkQueue) put(u model.HostLinkUpdate) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = map[string]model.HostLinkUpdate{}
	}
	q.pending[u.Name] = u
}

func (q *hostLinkQueue) take() map[string]model.HostLinkUpdate {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pending
	q.pending = nil
	return p
}

// HostLinkUpdate feeds a host interface change from the kernel's host
// link monitor. It never blocks.
func (e *Engine) HostLinkUpdate(u model.HostLinkUpdate) {
	e.hostLinks.put(u)
	e.nudge()
}

// watchHostLinks runs the kernel's host link monitor until ctx ends,
// restarting it with backoff; a restart reports every interface again.
func (e *Engine) watchHostLinks(ctx context.Context, k HostEndpointKernel) {
	var r retryState
	for {
		err := k.WatchHostLinks(ctx, e.HostLinkUpdate)
		if ctx.Err() != nil {
			return
		}
		r.fail(e.now(), e.opts.RetryMin, e.opts.RetryMax)
		e.log.Warn("watch host links stopped; restarting", "err", err, "attempt", r.attempts)
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.at.Sub(e.now())):
		}
	}
}

func (e *Engine) takeHostLinks() {
	for _, u := range e.hostLinks.take() {
		e.heps.onHostLink(u)
	}
}
