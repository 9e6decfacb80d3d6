package tcbpf

import (
	"sync/atomic"
	"time"
)

// OpCost is how often a kernel operation ran and what it cost in total, as
// observed on the real operations (not the start-up probe).
type OpCost struct {
	Count uint64
	Total time.Duration
}

// Mean is the average cost; zero before the first operation.
func (c OpCost) Mean() time.Duration {
	if c.Count == 0 {
		return 0
	}
	return c.Total / time.Duration(c.Count)
}

// ObservedCosts are the attach operations' costs since Open.
type ObservedCosts struct {
	TCXAttach, TCAttach, Detach OpCost
}

// opCounter accumulates one operation's costs without a lock: the attach
// paths run concurrently with readers of the figures.
type opCounter struct{ count, nanos atomic.Uint64 }

func (c *opCounter) observe(since time.Time) {
	c.count.Add(1)
	c.nanos.Add(uint64(time.Since(since)))
}

func (c *opCounter) read() OpCost {
	return OpCost{Count: c.count.Load(), Total: time.Duration(c.nanos.Load())}
}

type opCounters struct{ tcxAttach, tcAttach, detach opCounter }

// ObservedCosts reports what attaches and detaches cost so far.
func (d *Datapath) ObservedCosts() ObservedCosts {
	return ObservedCosts{TCXAttach: d.ops.tcxAttach.read(), TCAttach: d.ops.tcAttach.read(), Detach: d.ops.detach.read()}
}
