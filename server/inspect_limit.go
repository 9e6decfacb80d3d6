package server

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Inspect calls whose cost grows with the programmed state share
// heavyCalls slots, so parallel clients cannot pile up copies of a big
// answer in memory. A call without a slot waits at most heavyWait (less
// if its deadline is nearer), as the Inspect service's proto comment says.
const (
	heavyCalls = 4
	heavyWait  = 2 * time.Second
)

// callLimiter bounds concurrent calls; the nil limiter bounds nothing.
type callLimiter struct {
	slots   chan struct{}
	wait    time.Duration
	waiting atomic.Int32 // calls waiting for a slot now
}

func newCallLimiter(n int, wait time.Duration) *callLimiter {
	return &callLimiter{slots: make(chan struct{}, n), wait: wait}
}

// acquire takes a slot, waiting at most l.wait or until ctx ends; the
// returned func gives it back.
func (l *callLimiter) acquire(ctx context.Context) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	select {
	case l.slots <- struct{}{}:
		return l.release, nil
	default:
	}
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	timer := time.NewTimer(l.wait)
	defer timer.Stop()
	select {
	case l.slots <- struct{}{}:
		return l.release, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-timer.C:
		return nil, status.Error(codes.ResourceExhausted, errBusy.Error())
	}
}

func (l *callLimiter) release() { <-l.slots }

var errBusy = errors.New("too many Inspect list calls at once; retry later")
