package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dpd-dev/dpd/proto/felix"
)

// tracker records, with the time of arrival, what dpd reports: endpoint
// statuses and removals, DataplaneInSync and happy-endpoint reports.
type tracker struct {
	mu        sync.Mutex
	status    map[string]string    // endpoint key -> latest status; guarded by mu
	upAt      map[string]time.Time // first "up" since watchUp; guarded by mu
	watching  map[string]bool      // keys whose next "up" is timed; guarded by mu
	downFirst map[string]bool      // watched keys reported down before up; guarded by mu
	removedAt map[string]time.Time // status removals; guarded by mu
	inSync    []time.Time          // DataplaneInSync arrivals; guarded by mu
	happy     uint32               // happy endpoints per the latest report; guarded by mu
	ended     bool                 // the session's status channel closed; guarded by mu
	changed   chan struct{}        // closed and replaced on every message; guarded by mu
}

func newTracker() *tracker {
	return &tracker{
		status: map[string]string{}, upAt: map[string]time.Time{}, watching: map[string]bool{}, downFirst: map[string]bool{},
		removedAt: map[string]time.Time{}, changed: make(chan struct{}),
	}
}

func (t *tracker) run(statuses <-chan *felix.FromDataplane) {
	for m := range statuses {
		now := time.Now()
		t.mu.Lock()
		switch {
		case m.GetWorkloadEndpointStatusUpdate() != nil:
			u := m.GetWorkloadEndpointStatusUpdate()
			key, st := endpointKey(u.GetId()), u.GetStatus().GetStatus()
			t.status[key] = st
			switch {
			case st == "up" && t.watching[key]:
				t.upAt[key] = now
				delete(t.watching, key)
			case st == "down" && t.watching[key]:
				t.downFirst[key] = true
			}
		case m.GetWorkloadEndpointStatusRemove() != nil:
			key := endpointKey(m.GetWorkloadEndpointStatusRemove().GetId())
			delete(t.status, key)
			t.removedAt[key] = now
		case m.GetHappyEndpoints() != nil:
			t.happy = m.GetHappyEndpoints().GetHappy()
		case m.GetDataplaneInSync() != nil:
			t.inSync = append(t.inSync, now)
		}
		t.notifyLocked()
		t.mu.Unlock()
	}
	t.mu.Lock()
	t.ended = true
	t.notifyLocked()
	t.mu.Unlock()
}

func (t *tracker) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// watchUp times key's next "up" (call it before sending the update).
func (t *tracker) watchUp(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.upAt, key)
	delete(t.removedAt, key)
	delete(t.downFirst, key)
	t.watching[key] = true
}

// wasDown reports whether key was reported down before its timed "up".
func (t *tracker) wasDown(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.downFirst[key]
}

// forget drops what was recorded about key (before removing it).
func (t *tracker) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.removedAt, key)
	delete(t.upAt, key)
	delete(t.watching, key)
	delete(t.downFirst, key)
}

func (t *tracker) up(key string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.upAt[key]
	return at, ok
}

// errSessionEnded is returned by await once no more reports can come.
var errSessionEnded = errors.New("the controller session ended")

// await blocks until condLocked (called with mu held) holds, the session
// ends or ctx is done. It wakes on every report and never polls.
func (t *tracker) await(ctx context.Context, what string, condLocked func() bool) error {
	for {
		t.mu.Lock()
		ok, ended, changed := condLocked(), t.ended, t.changed
		t.mu.Unlock()
		switch {
		case ok:
			return nil
		case ended:
			return fmt.Errorf("waiting for %s: %w", what, errSessionEnded)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

// awaitAllUp waits until every key has its timed "up"; an endpoint in
// status error ends the wait early.
func (t *tracker) awaitAllUp(ctx context.Context, keys []string) error {
	var bad string
	err := t.await(ctx, fmt.Sprintf("%d endpoints to report up", len(keys)), func() bool {
		for _, k := range keys {
			if t.status[k] == "error" {
				bad = k
				return true
			}
			if _, ok := t.upAt[k]; !ok {
				return false
			}
		}
		return true
	})
	if err == nil && bad != "" {
		return fmt.Errorf("endpoint %s reported status error", bad)
	}
	if err != nil {
		return fmt.Errorf("%w (%d of %d up)", err, t.countUp(keys), len(keys))
	}
	return nil
}

func (t *tracker) countUp(keys []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, k := range keys {
		if _, ok := t.upAt[k]; ok {
			n++
		}
	}
	return n
}

// awaitRemoved waits until every key's status removal arrived.
func (t *tracker) awaitRemoved(ctx context.Context, keys []string) error {
	return t.await(ctx, fmt.Sprintf("%d endpoint removals", len(keys)), func() bool {
		for _, k := range keys {
			if _, ok := t.removedAt[k]; !ok {
				return false
			}
		}
		return true
	})
}

// awaitInSync waits for the n-th DataplaneInSync and returns its arrival.
func (t *tracker) awaitInSync(ctx context.Context, n int) (time.Time, error) {
	var at time.Time
	err := t.await(ctx, "DataplaneInSync", func() bool {
		if len(t.inSync) >= n {
			at = t.inSync[n-1]
			return true
		}
		return false
	})
	return at, err
}

// notUp lists the keys whose latest reported status is not "up".
func (t *tracker) notUp(keys []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, k := range keys {
		if t.status[k] != "up" {
			out = append(out, k+" ("+t.status[k]+")")
		}
	}
	return out
}

// happyCount is the happy total of the latest happy-endpoints report.
func (t *tracker) happyCount() uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.happy
}
