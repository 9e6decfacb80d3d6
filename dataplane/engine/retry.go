package engine

import "time"

// retryState is the backoff of one object whose last kernel call failed.
type retryState struct {
	attempts int       // consecutive failures
	at       time.Time // not retried before this
}

// due reports whether the object may be tried at now.
func (r *retryState) due(now time.Time) bool { return r.attempts == 0 || !now.Before(r.at) }

// failing reports whether the last attempt failed.
func (r *retryState) failing() bool { return r.attempts > 0 }

// fail doubles the backoff from min up to max.
func (r *retryState) fail(now time.Time, min, max time.Duration) {
	r.attempts++
	d := min
	for i := 1; i < r.attempts && d < max; i++ {
		d *= 2
	}
	r.at = now.Add(clampDuration(d, min, max))
}

func (r *retryState) reset() { *r = retryState{} }

func clampDuration(d, lo, hi time.Duration) time.Duration {
	if d < lo {
		return lo
	}
	if d > hi {
		return hi
	}
	return d
}

// earliest returns the earlier non-zero time.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
