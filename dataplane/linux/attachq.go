package linux

import (
	"context"
	"fmt"
	"slices"

	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

// Attaching the entry programs can be slow: a first TCX attach waits for
// an RCU grace period (~10 ms on some kernels, serialised under RTNL). So
// it never runs under Kernel.mu. A workload interface the monitor reports
// is queued here, once per name (the latest ifindex wins), and an attach
// worker gives it the entry programs with a dpd_ifstate entry lacking
// READY, so it drops until programmed; the attach runs unlocked and only
// its result is recorded under the lock. ApplyEndpoint of an interface
// still queued takes the job over and attaches itself (unlocked too); of
// one the worker is attaching, it waits for that attach only, never for
// the worker's other jobs. Whoever attaches, the order on the interface
// is the same: entry programs and a not-ready entry before policy, READY
// and routes, so it never passes traffic unpoliced.

// attachQueue holds the interfaces waiting for their entry programs and
// those being attached. Guarded by Kernel.mu; bounded by the number of
// interfaces.
type attachQueue struct {
	queued  map[string]int // name -> ifindex, the latest report wins
	order   []string       // queued names, oldest first; may name jobs taken since
	running map[string]bool
	wake    chan struct{} // capacity 1: the worker has something to do
}

func newAttachQueue() *attachQueue {
	return &attachQueue{queued: map[string]int{}, running: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// put queues name at ifindex (replacing a queued ifindex) and wakes the worker.
func (q *attachQueue) put(name string, ifindex int) {
	if _, ok := q.queued[name]; !ok {
		q.order = append(q.order, name)
	}
	q.queued[name] = ifindex
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued job that is not running, if any (one
// that is waits for that attach to end). Names no longer queued (taken
// over by an apply, or a second entry of a name taken since) are dropped
// on the way, in place: at a start that finds every interface there the
// apply takes most jobs over while the worker runs, and a set of the
// names seen, built for every job, made the cold start's heap peak.
func (q *attachQueue) next() (string, int, bool) {
	for i := 0; i < len(q.order); {
		name := q.order[i]
		ifindex, ok := q.queued[name]
		switch {
		case !ok:
			q.order = slices.Delete(q.order, i, i+1)
		case q.running[name]:
			i++
		default:
			q.order = slices.Delete(q.order, i, i+1)
			delete(q.queued, name)
			return name, ifindex, true
		}
	}
	return "", 0, false
}

// take removes name's queued job, if any: its apply attaches instead.
func (q *attachQueue) take(name string) { delete(q.queued, name) }

// pending reports how many interfaces wait for the worker.
func (q *attachQueue) pending() int { return len(q.queued) }

// attachPlan is one attach decided under the lock and run without it.
type attachPlan struct {
	st      *endpointState
	name    string
	ifindex int
	// query: ask whether current entry programs are there before
	// attaching (not for an interface that appeared while this process
	// ran: nothing of an earlier dpd can be on it, and Attach is
	// idempotent should something be there after all).
	query bool
	// owners: a fail-close attach, which must not take over another dpd's
	// interface nobody asked it to police.
	owners bool
	// tracked: st was in the programmer's states when planned.
	tracked bool
}

// attachResult is what running an attachPlan found and did.
type attachResult struct {
	mode     tcbpf.AttachMode
	attached bool // Attach ran and succeeded (a write)
	foreign  bool // another dpd's programs and none of ours: left alone
	ownerErr error
	err      error
}

// run attaches per p through entry. It takes no lock: the facility is
// safe for concurrent use.
func (p attachPlan) run(entry entryFacility) attachResult {
	var r attachResult
	if p.owners {
		ours, foreign, err := entry.EntryOwners(p.ifindex)
		if err != nil {
			// Not knowing whose programs are there must not leave it
			// open: fail it closed as if nothing were attached.
			r.ownerErr = err
		} else if foreign && !ours {
			r.foreign = true
			return r
		}
	}
	if p.query {
		if mode, ok := entry.AttachedCurrent(p.ifindex, p.name); ok {
			r.mode = mode
			return r
		}
	}
	mode, err := entry.Attach(p.ifindex, p.name)
	if err != nil {
		r.err = fmt.Errorf("attach %s: %w", p.name, err)
		return r
	}
	r.mode, r.attached = mode, true
	return r
}

// record notes r on p's state, under the lock. It reports whether the
// state still describes the interface that was attached.
func (e *endpointProgrammer) record(p *attachPlan, r attachResult) bool {
	if r.attached {
		e.ops.Attaches++
	}
	if r.err != nil || r.foreign || p.st.ifindex != p.ifindex {
		return false
	}
	p.st.mode, p.st.attachOK = r.mode, true
	return true
}

// runAttachLocked runs p with k.mu released and records the result. The
// job is marked running meanwhile, so no other attach of the interface
// starts and the datapath is not reopened under it.
func (k *Kernel) runAttachLocked(p *attachPlan) attachResult {
	k.attachQ.running[p.name] = true
	entry := k.eps.entry
	k.mu.Unlock()
	r := p.run(entry)
	k.mu.Lock()
	delete(k.attachQ.running, p.name)
	k.attachCond.Broadcast()
	return r
}

// waitAttachLocked waits, releasing k.mu meanwhile, until no attach of
// name runs.
func (k *Kernel) waitAttachLocked(name string) {
	for k.attachQ.running[name] {
		k.attachCond.Wait()
	}
}

// waitWorkersLocked waits until no attach and no preload runs at all,
// both at once (each wait releases mu, and the attach worker may start
// an attach meanwhile): before the datapath is closed or reopened.
func (k *Kernel) waitWorkersLocked() {
	for len(k.attachQ.running) > 0 || k.preloadWorkers > 0 {
		k.attachCond.Wait()
	}
}

// attachNext runs the oldest queued fail-close attach, if any, and
// reports whether there was one.
func (k *Kernel) attachNext() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return false
	}
	name, ifindex, ok := k.attachQ.next()
	if !ok {
		return false
	}
	p := k.eps.planFailClose(name, ifindex)
	if p == nil {
		return true // nothing to do any more
	}
	r := k.runAttachLocked(p)
	if k.closed {
		return false
	}
	k.eps.finishFailClose(p, r)
	return true
}

// drainAttaches runs every queued attach on the calling goroutine.
func (k *Kernel) drainAttaches() {
	for k.attachNext() {
	}
}

// attachLoop is the attach worker: it runs queued attaches until ctx ends.
func (k *Kernel) attachLoop(ctx context.Context) {
	for {
		k.drainAttaches()
		select {
		case <-ctx.Done():
			return
		case <-k.attachQ.wake:
		}
	}
}

// PendingAttaches is how many interfaces wait for their entry programs.
func (k *Kernel) PendingAttaches() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.attachQ.pending()
}
