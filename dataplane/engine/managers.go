package engine

import "time"

// manager is what the apply loop asks of each kind of kernel state; the
// Engine keeps them in one list (Engine.managers).
type manager interface {
	// readyWork: something dirty may be applied at now.
	readyWork(now time.Time) bool
	// failing counts objects whose last kernel call failed.
	failing() int
	// nextRetry is when the earliest failed object may be retried (zero:
	// none is failing).
	nextRetry() time.Time
	// markAllForResync re-applies everything on the next pass.
	markAllForResync()
}

// dirtyQueue is the retry bookkeeping every manager of many objects
// shares: the objects waiting for a kernel write, each with the backoff
// of its last failure (retryOf).
type dirtyQueue[K comparable] struct {
	dirty   map[K]struct{}
	retryOf func(K) *retryState
}

func (q *dirtyQueue[K]) readyWork(now time.Time) bool {
	for k := range q.dirty {
		if q.retryOf(k).due(now) {
			return true
		}
	}
	return false
}

func (q *dirtyQueue[K]) nextRetry() (next time.Time) {
	for k := range q.dirty {
		if r := q.retryOf(k); r.failing() {
			next = earliest(next, r.at)
		}
	}
	return next
}

func (q *dirtyQueue[K]) failing() (n int) {
	for k := range q.dirty {
		if q.retryOf(k).failing() {
			n++
		}
	}
	return n
}

// singleRetry is the bookkeeping of a manager of one kernel call (the
// configuration, the end of an apply pass).
func singleRetry(pending bool, r *retryState, now time.Time) bool { return pending && r.due(now) }

func singleFailing(r *retryState) int {
	if r.failing() {
		return 1
	}
	return 0
}

func singleNextRetry(r *retryState) time.Time {
	if r.failing() {
		return r.at
	}
	return time.Time{}
}

func (c *configManager) readyWork(now time.Time) bool { return singleRetry(c.dirty, &c.retry, now) }
func (c *configManager) failing() int                 { return singleFailing(&c.retry) }
func (c *configManager) nextRetry() time.Time         { return singleNextRetry(&c.retry) }
func (c *configManager) markAllForResync()            { c.dirty = true }

// endApply is the kernel's EndApply after a pass that wrote something:
// pending until it succeeds.
type endApply struct {
	pending bool
	retry   retryState
}

func (a *endApply) readyWork(now time.Time) bool { return singleRetry(a.pending, &a.retry, now) }
func (a *endApply) failing() int                 { return singleFailing(&a.retry) }
func (a *endApply) nextRetry() time.Time         { return singleNextRetry(&a.retry) }
func (a *endApply) markAllForResync()            {}
