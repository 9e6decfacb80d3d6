package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// slowApply: a pass that takes longer is logged at info with its phases.
const slowApply = 500 * time.Millisecond

// pass collects what one apply pass did.
type pass struct {
	did      bool // some kernel write was attempted
	failed   int
	firstErr string
	e        *Engine
	mark     time.Time // end of the previous phase
	phases   []any     // phase name, duration pairs for the log
}

// phase records the time since the previous phase ended under name.
func (p *pass) phase(name string) {
	now := time.Now()
	if !p.mark.IsZero() {
		p.phases = append(p.phases, name, now.Sub(p.mark).Round(time.Microsecond))
	}
	p.mark = now
}

func (p *pass) fail(kind, id string, err error) {
	p.failed++
	if p.firstErr == "" {
		p.firstErr = kind + " " + id + ": " + err.Error()
	}
	p.e.met.applyFailures.WithLabelValues(kind).Inc()
	p.e.log.Warn("apply failed; will retry", "kind", kind, "id", id, "err", err)
}

// applyAllowed: nothing is applied before the first InSync, nor while the
// active session is re-sending its snapshot (the mark-and-sweep decides at
// its InSync what goes). A session that ended mid-snapshot lets the engine
// resume applying what it has.
func (e *Engine) applyAllowed() bool {
	if !e.everInSync {
		return false
	}
	s := e.loopSess
	return s == nil || e.sessInSync || s.isClosed()
}

// readyWork reports whether some dirty state may be applied now.
func (e *Engine) readyWork(now time.Time) bool {
	for _, m := range e.managers {
		if m.readyWork(now) {
			return true
		}
	}
	return false
}

// needReport: the active session still waits for its first report or for
// DataplaneInSync, which an apply pass sends.
func (e *Engine) needReport() bool {
	s := e.loopSess
	if s == nil || s.isClosed() || !e.sessInSync {
		return false
	}
	return !s.reported || (!s.dpInSyncSent && e.failing() == 0)
}

// failing counts objects whose last kernel call failed.
func (e *Engine) failing() (n int) {
	for _, m := range e.managers {
		n += m.failing()
	}
	return n
}

// nextRetry is when the earliest failed object may be retried.
func (e *Engine) nextRetry() (next time.Time) {
	for _, m := range e.managers {
		next = earliest(next, m.nextRetry())
	}
	return next
}

// quiescent: nothing the engine could apply right now is waiting.
func (e *Engine) quiescent(now time.Time) bool {
	if !e.applyAllowed() {
		return true
	}
	return e.applyAt.IsZero() && !e.readyWork(now) && !e.needReport()
}

// markAllForResync re-applies everything on the next pass, repairing
// drift between the kernel and what the engine believes it holds.
func (e *Engine) markAllForResync() {
	if r, ok := e.k.(Resyncer); ok {
		r.Resync()
	}
	for _, m := range e.managers {
		m.markAllForResync()
	}
}

// maybeApply runs a pass when applying is allowed, there is work and the
// token bucket has a token; otherwise it schedules the pass.
func (e *Engine) maybeApply(now time.Time) {
	if !e.applyAllowed() || (!e.readyWork(now) && !e.needReport()) {
		return
	}
	if e.applyAt.IsZero() {
		r := e.limiter.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			e.applyAt = now.Add(d)
			return
		}
	} else if now.Before(e.applyAt) {
		return
	}
	e.applyAt = time.Time{}
	e.apply(now)
}

// apply writes the dirty state in dependency order: removals of services,
// routes, VTEPs, host metadata and endpoints, then upserts of sets,
// endpoints, host metadata, VTEPs, routes and services, and last the
// removal of sets no applied endpoint references any more.
func (e *Engine) apply(now time.Time) {
	start := time.Now()
	p := &pass{e: e, mark: start}
	if e.applyConfig(now, p) {
		e.services.obj.applyRemovals(e, now, p, e.k.RemoveService)
		e.routes.applyRemovals(e, now, p, e.k.RemoveRoute)
		e.vteps.applyRemovals(e, now, p, func(v *model.VTEP) error { return e.k.RemoveVTEP(v.Node) })
		e.hostMeta.applyRemovals(e, now, p, func(h *model.HostMetadata) error { return e.k.RemoveHostMetadata(h.Hostname) })
		p.phase("config_removals")
		e.applyEndpointRemovals(now, p)
		p.phase("endpoint_removals")
		e.adoptPinned(now, p)
		e.applyIPSetUpserts(now, p)
		p.phase("ipsets")
		e.applyEndpointUpserts(now, p)
		p.phase("endpoints")
		// An endpoint is up once its own apply returned: its status goes
		// out now, not after the rest of the pass (host endpoints, routes,
		// services, EndApply), and Inspect shows it first.
		e.publish()
		e.flushOutbox()
		e.applyHostEndpoints(now, p)
		e.hostMeta.applyUpserts(e, now, p, e.k.ApplyHostMetadata)
		e.vteps.applyUpserts(e, now, p, e.k.ApplyVTEP)
		e.routes.applyUpserts(e, now, p, e.k.ApplyRoute)
		e.services.obj.applyUpserts(e, now, p, e.k.ApplyService)
		e.applyIPSetRemovals(now, p)
		p.phase("routes_services")
		if ea := &e.endApply; (p.did || ea.pending) && ea.retry.due(now) {
			if err := e.k.EndApply(); err != nil {
				ea.pending = true
				ea.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
				p.fail("end_apply", "", err)
			} else {
				ea.pending = false
				ea.retry.reset()
			}
		}
	}
	if p.did {
		p.phase("end_apply")
		took := time.Since(start)
		level := slog.LevelDebug
		if took > slowApply {
			level = slog.LevelInfo
		}
		if ctx := context.Background(); e.log.Enabled(ctx, level) {
			e.log.Log(ctx, level, "apply pass", append([]any{"took", took.Round(time.Microsecond), "failed", p.failed}, p.phases...)...)
		}
		e.met.applyDuration.Observe(took.Seconds())
		e.lastApply = now
		e.lastApplyErr = p.firstErr
	}
	e.met.dirty.Set(float64(len(e.weps.dirty)))
	e.met.happy.Set(float64(len(e.weps.happy)))
	e.afterApply(p)
}

// applyConfig configures the kernel when needed and reports whether the
// rest of the pass may run: nothing is applied to an unconfigured kernel.
func (e *Engine) applyConfig(now time.Time, p *pass) bool {
	c := &e.cfg
	if !c.dirty {
		return c.configured
	}
	if !c.retry.due(now) {
		return c.configured
	}
	p.did = true
	if err := e.k.Configure(c.copy()); err != nil {
		c.retry.fail(now, e.opts.RetryMin, e.opts.RetryMax)
		c.lastErr = err.Error()
		p.fail("config", "", err)
		return c.configured
	}
	c.dirty, c.configured, c.lastErr = false, true, ""
	c.retry.reset()
	return true
}
