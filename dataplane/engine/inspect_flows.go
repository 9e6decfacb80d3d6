package engine

import (
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// FlowObserver is implemented by kernels that report flow events (each
// new flow's decision, with the deciding rule). It is optional: Inspect's
// Observe says so when the kernel has none.
type FlowObserver interface {
	// ObserveFlows returns the recorded events at or after since (all for
	// the zero time; at most the newest last when last > 0), oldest
	// first, and, when follow, a subscription to every later event with a
	// buffer of buffer events; nil otherwise. The caller closes it.
	ObserveFlows(since time.Time, last int, follow bool, buffer int) ([]model.FlowEvent, FlowSubscription)
	// FlowStats describes the pipeline: events read, dropped by the
	// kernel, lost by slow subscribers.
	FlowStats() model.FlowStats
}

// FlowSubscription delivers the flow events recorded after it was made.
type FlowSubscription interface {
	// Events is closed when the subscription or the kernel is closed. An
	// event's Lost counts the events the subscriber missed before it.
	Events() <-chan model.FlowEvent
	// Lost counts the events this subscriber missed in total.
	Lost() uint64
	Close()
}
