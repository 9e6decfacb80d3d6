package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Errors returned to senders.
var (
	// ErrSessionClosed is returned by Submit and Reject on a closed session.
	ErrSessionClosed = errors.New("engine: session closed")
	// ErrStopped is returned once Run has returned.
	ErrStopped = errors.New("engine: stopped")
)

// Engine is the dirty-state engine. The Run goroutine owns every manager;
// other goroutines reach the engine only through the inbox, the link queue,
// the session fields under mu and the published snapshot.
type Engine struct {
	opts    Options
	log     *slog.Logger
	k       Kernel
	met     *metrics
	started time.Time

	inbox     chan item
	wake      chan struct{} // cap 1: nudges the loop (session change, link update)
	links     linkQueue
	hostLinks hostLinkQueue
	stop      chan struct{} // closed when Run returns
	stopOnce  sync.Once
	running   atomic.Bool

	mu            sync.Mutex // guards sess and nextSessionID
	sess          *session   // latest session; guarded by mu
	nextSessionID uint64     // guarded by mu

	received, invalid atomic.Uint64
	blockedSenders    atomic.Int64 // senders waiting on a full inbox

	snap snapshotStore

	// Everything below is owned by the Run goroutine.
	loopSess   *session // session whose mark-and-sweep epoch is current
	sessInSync bool     // loopSess has sent InSync
	everInSync bool     // some session has sent InSync: applying may begin

	cfg      configManager
	ipsets   ipsetManager
	policies rulesStore[model.PolicyKey]
	profiles rulesStore[string]
	weps     endpointManager
	heps     hostEndpointManager
	hepSnap  hostSnapshot
	routes   *objectManager[routeKey, model.Route]
	services serviceManager
	hostMeta *objectManager[string, model.HostMetadata]
	vteps    *objectManager[string, model.VTEP]
	acks     ackStore
	// managers lists the kernel state above for the apply loop's
	// questions (readyWork, failing, nextRetry, markAllForResync).
	managers []manager

	// resolved memoises endpoint policy resolutions by reference key
	// during an endpoint apply pass; nil outside one (policies change
	// between passes).
	resolved map[string]*resolution

	limiter      *rate.Limiter
	applyAt      time.Time // a throttled apply is due then (zero: none)
	resyncAt     time.Time
	endApply     endApply
	lastApply    time.Time
	lastApplyErr string
	flushWaiters []chan struct{}
	// outbox holds this iteration's statuses until publish has updated
	// Inspect's snapshot, so no client sees "up" before Inspect does.
	outbox []outMsg

	queries chan func() // read-only Inspect questions, run by the loop
}

// New returns an engine; Run starts it. Options.Kernel is required.
func New(opts Options) *Engine {
	if opts.Kernel == nil {
		panic("dataplane: Options.Kernel is nil")
	}
	opts = withDefaults(opts)
	e := &Engine{
		opts:    opts,
		log:     opts.Log,
		k:       opts.Kernel,
		met:     newMetrics(opts.Registry, opts.Log),
		started: opts.Now(),
		inbox:   make(chan item, opts.InboxSize),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		queries: make(chan func()),
		limiter: rate.NewLimiter(rate.Every(opts.ApplyInterval), opts.ApplyBurst),
	}
	e.cfg.init()
	ex, err := parseIfaceMatcher(opts.InterfaceExclude)
	if err != nil {
		panic("dataplane: " + err.Error())
	}
	e.cfg.defaultExclude, e.cfg.interfaceExclude = ex, ex
	e.ipsets.init()
	e.policies.init()
	e.profiles.init()
	e.weps.init()
	e.heps.init()
	e.routes = newRouteManager()
	e.services.init()
	e.hostMeta = newHostMetaManager()
	e.vteps = newVTEPManager()
	e.acks.init()
	e.managers = []manager{&e.cfg, &e.endApply, &e.ipsets, &e.weps, &e.heps,
		e.hostMeta, e.vteps, e.routes, e.services.obj}
	e.snap.init()
	return e
}

func withDefaults(o Options) Options {
	if o.Name == "" {
		o.Name = "memory"
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.InboxSize <= 0 {
		o.InboxSize = 1024
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 100
	}
	if o.ApplyInterval <= 0 {
		o.ApplyInterval = 10 * time.Millisecond
	}
	if o.ApplyBurst <= 0 {
		o.ApplyBurst = 10
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 50 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 30 * time.Second
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = o.RetryMin
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = 5 * time.Minute
	}
	if o.MaxPendingStatuses <= 0 {
		o.MaxPendingStatuses = DefaultMaxPendingStatuses
	}
	if o.HeartbeatFirst <= 0 {
		o.HeartbeatFirst = time.Second
	}
	if o.HeartbeatFirst > 10*time.Second {
		o.HeartbeatFirst = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.InterfaceExclude == "" {
		o.InterfaceExclude = DefaultInterfaceExclude
	}
	return o
}

func (e *Engine) now() time.Time { return e.opts.Now() }

// nudge wakes the loop without blocking.
func (e *Engine) nudge() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run processes the inbox and applies until ctx ends. It also watches the
// kernel's links. When it returns the active session is closed; the kernel
// keeps enforcing the last state.
func (e *Engine) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("engine: already running")
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.watchLinks(wctx)
	}()
	if hk, ok := e.k.(HostEndpointKernel); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.watchHostLinks(wctx, hk)
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
		e.stopOnce.Do(func() { close(e.stop) })
		e.mu.Lock()
		s := e.sess
		e.mu.Unlock()
		if s != nil {
			s.Close()
		}
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	e.resyncAt = e.now().Add(e.opts.ResyncInterval)
	for {
		select {
		case <-ctx.Done():
			return nil
		case it := <-e.inbox:
			e.handleBatch(it)
		case q := <-e.queries:
			q()
		case <-e.wake:
		case <-timer.C:
		}
		now := e.now()
		e.step(now)
		d := time.Hour
		if next := e.nextDeadline(); !next.IsZero() {
			d = max(next.Sub(e.now()), 0)
		}
		timer.Reset(d)
	}
}

// handleBatch takes the first item and drains up to MaxBatch more.
func (e *Engine) handleBatch(first item) {
	n := 1
	e.handle(first)
drain:
	for n <= e.opts.MaxBatch {
		select {
		case it := <-e.inbox:
			e.handle(it)
			n++
		default:
			break drain
		}
	}
	e.met.batch.Observe(float64(n))
}

// step runs everything that does not read the inbox: session epochs, link
// changes, heartbeats, resync, apply, publishing, then the statuses the
// iteration produced, and flush release.
func (e *Engine) step(now time.Time) {
	e.syncSession()
	e.takeLinks()
	e.takeHostLinks()
	e.heartbeat(now)
	if !now.Before(e.resyncAt) {
		e.resyncAt = now.Add(e.opts.ResyncInterval)
		if e.applyAllowed() {
			e.markAllForResync()
		}
	}
	e.maybeApply(now)
	e.publish()
	e.flushOutbox()
	if len(e.flushWaiters) > 0 && e.quiescent(now) {
		for _, ch := range e.flushWaiters {
			close(ch)
		}
		e.flushWaiters = nil
	}
}

// nextDeadline is the earliest time the loop must wake without input.
func (e *Engine) nextDeadline() time.Time {
	var next time.Time
	take := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	take(e.resyncAt)
	take(e.applyAt)
	if s := e.loopSess; s != nil && !s.isClosed() {
		take(s.hbNext)
	}
	if e.applyAllowed() {
		take(e.nextRetry())
	}
	return next
}

// Flush waits until every message submitted before it has been handled and
// the engine has nothing left to apply now (work waiting for a retry
// backoff or for a missing reference does not count). Tests and tools use
// it instead of sleeping.
func (e *Engine) Flush(ctx context.Context) error {
	ch := make(chan struct{})
	select {
	case e.inbox <- item{flush: ch}:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stop:
		return ErrStopped
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stop:
		return ErrStopped
	}
}

// LinkUpdate feeds an interface change from the kernel's monitor. It never
// blocks: changes are coalesced per interface (only the latest state
// matters), so the queue is bounded by the number of interfaces and the
// monitor can call it while holding its own locks.
func (e *Engine) LinkUpdate(u model.LinkUpdate) {
	e.links.put(u)
	e.nudge()
}

// watchLinks runs Kernel.WatchLinks until ctx ends, restarting it with
// backoff if it stops early. Changes may have been missed meanwhile, so
// after a restart every endpoint's link is re-evaluated.
func (e *Engine) watchLinks(ctx context.Context) {
	var r retryState
	for {
		err := e.k.WatchLinks(ctx, e.LinkUpdate)
		if ctx.Err() != nil {
			return
		}
		r.fail(e.now(), e.opts.RetryMin, e.opts.RetryMax)
		e.log.Warn("watch links stopped; restarting", "err", err, "attempt", r.attempts)
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.at.Sub(e.now())):
		}
		e.links.putAll()
		e.nudge()
	}
}

// linkQueue holds link changes not yet seen by the loop.
type linkQueue struct {
	mu      sync.Mutex
	pending map[string]model.LinkState // guarded by mu
	all     bool                       // guarded by mu; re-check every link
}

func (q *linkQueue) putAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.all = true
}

func (q *linkQueue) put(u model.LinkUpdate) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = map[string]model.LinkState{}
	}
	q.pending[u.Name] = u.State
}

func (q *linkQueue) take() (map[string]model.LinkState, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p, all := q.pending, q.all
	q.pending, q.all = nil, false
	return p, all
}

func (e *Engine) takeLinks() {
	pending, all := e.links.take()
	if all {
		if pending == nil {
			pending = map[string]model.LinkState{}
		}
		for iface := range e.weps.byIface.byRef {
			pending[iface] = model.LinkUp // only the name matters
		}
		e.heps.markAllForResync()
	}
	for name := range pending {
		e.weps.linkChanged(name)
		e.heps.linkChanged(name)
	}
}
