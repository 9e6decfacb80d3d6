package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// item is one inbox entry: an update or a rejection from a session, or a
// Flush barrier.
type item struct {
	sess   *session
	upd    model.Update
	reject *model.Rejection // non-nil: a message that failed translation
	flush  chan struct{}    // non-nil: a Flush barrier
	recv   time.Time        // a WorkloadEndpointUpdate's receipt (else zero)
}

// session implements Session. Its statuses wait in an outbox (outbox.go)
// drained by a pump goroutine into out, so the engine loop never blocks on
// a slow reader.
type session struct {
	e     *Engine
	id    uint64
	peer  string
	since time.Time

	out       chan Status
	done      chan struct{} // closed by Close
	pumpDone  chan struct{} // closed when the pump has closed out
	notify    chan struct{} // cap 1: the queue grew
	closeOnce sync.Once

	mu     sync.Mutex
	queue  outbox // guarded by mu
	popped uint64 // guarded by mu: statuses the pump took
	sent   uint64 // guarded by mu: statuses the reader took

	errMu sync.Mutex
	err   error // guarded by errMu: why the engine ended the session

	// Owned by the engine's Run goroutine.
	reported     bool // statuses and the full happy report were sent
	dpInSyncSent bool
	happySent    map[model.WorkloadID]struct{}
	hbNext       time.Time // next heartbeat
	hbLast       time.Time // last heartbeat (zero: none yet)
}

// NewSession starts a controller session: a new mark-and-sweep epoch. Only
// one session is active; an open one is closed first (its Out closes).
func (e *Engine) NewSession(peer string) Session {
	e.mu.Lock()
	if e.sess != nil {
		e.sess.Close()
	}
	e.nextSessionID++
	s := &session{
		e:        e,
		id:       e.nextSessionID,
		peer:     peer,
		since:    e.now(),
		out:      make(chan Status),
		done:     make(chan struct{}),
		pumpDone: make(chan struct{}),
		notify:   make(chan struct{}, 1),
	}
	e.sess = s
	e.mu.Unlock()
	go s.pump()
	e.nudge()
	return s
}

func (s *session) ID() uint64         { return s.id }
func (s *session) Out() <-chan Status { return s.out }

func (s *session) isClosed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Close ends the session; Out is closed when Close returns. Statuses not
// yet read are dropped: the next session gets a full report. Their memory
// is released at once, as the server may hold the session for as long as
// a controller that stopped reading keeps its connection open.
func (s *session) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		<-s.pumpDone
		s.mu.Lock()
		s.queue = outbox{}
		s.mu.Unlock()
		s.e.nudge()
	})
}

func (s *session) Submit(ctx context.Context, u model.Update) error {
	if u == nil {
		return errors.New("submit: nil update")
	}
	it := item{sess: s, upd: u}
	if _, ok := u.(*model.WorkloadEndpointUpdate); ok {
		// Only an endpoint's programming latency starts at its receipt;
		// reading the clock for every message is a measurable share of
		// ingest.
		it.recv = s.e.now()
	}
	return s.e.enqueue(ctx, it)
}

func (s *session) Reject(ctx context.Context, r model.Rejection) error {
	if r.Kind == "" {
		r.Kind = model.KindUnknown
	}
	if r.Reason == "" {
		r.Reason = "invalid message"
	}
	return s.e.enqueue(ctx, item{sess: s, reject: &r})
}

// enqueue puts it in the inbox, blocking while the inbox is full.
func (e *Engine) enqueue(ctx context.Context, it item) error {
	if it.sess.isClosed() {
		return ErrSessionClosed
	}
	select {
	case <-e.stop:
		return ErrStopped
	default:
	}
	select {
	case e.inbox <- it:
		return nil
	default:
	}
	e.blockedSenders.Add(1)
	defer e.blockedSenders.Add(-1)
	e.met.inboxFull.Inc()
	select {
	case e.inbox <- it:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-it.sess.done:
		return ErrSessionClosed
	case <-e.stop:
		return ErrStopped
	}
}

// BlockedSenders reports how many Submit/Reject calls wait on a full inbox.
func (e *Engine) BlockedSenders() int { return int(e.blockedSenders.Load()) }

// syncSession starts a new epoch when a newer session exists.
func (e *Engine) syncSession() {
	e.mu.Lock()
	s := e.sess
	e.mu.Unlock()
	if s != nil && s != e.loopSess {
		e.startEpoch(s)
	}
}

// startEpoch begins the mark-and-sweep for s: everything known is stale
// until re-sent; what is still stale at s's InSync is removed.
func (e *Engine) startEpoch(s *session) {
	e.loopSess = s
	e.sessInSync = false
	s.hbNext = s.since.Add(e.opts.HeartbeatFirst)
	e.ipsets.markStale()
	e.policies.markStale()
	e.profiles.markStale()
	e.weps.markStale()
	e.heps.markStale()
	e.routes.markStale()
	e.services.markStale()
	e.hostMeta.markStale()
	e.vteps.markStale()
	e.acks.markStale()
	e.log.Debug("snapshot epoch started: what the session does not re-send before InSync is removed", "session", s.id, "peer", s.peer)
}

// onInSync ends the current epoch's snapshot: what was not re-sent goes.
func (e *Engine) onInSync() {
	if e.sessInSync {
		return // a repeated InSync changes nothing
	}
	e.sessInSync = true
	e.everInSync = true
	var swept int
	for _, id := range e.ipsets.sweep() {
		swept++
		e.weps.dirtySetUsers(id)
	}
	for _, k := range e.policies.sweep() {
		swept++
		e.weps.dirtyUsers(e.weps.polUsers.users(k))
	}
	for _, k := range e.profiles.sweep() {
		swept++
		e.weps.dirtyUsers(e.weps.profUsers.users(k))
	}
	swept += e.weps.sweep()
	swept += e.heps.sweep()
	swept += len(e.routes.sweep())
	swept += e.services.sweep()
	swept += len(e.hostMeta.sweep())
	swept += len(e.vteps.sweep())
	swept += e.acks.sweep()
	e.log.Info("controller in sync", "removed_stale", swept)
}

// handle routes one inbox item. Items of a session that a newer one has
// replaced are dropped: the newer session re-sends the full state.
func (e *Engine) handle(it item) {
	if it.flush != nil {
		e.flushWaiters = append(e.flushWaiters, it.flush)
		return
	}
	if it.sess != e.loopSess {
		e.syncSession()
		if it.sess != e.loopSess {
			return
		}
	}
	if it.reject != nil {
		e.onReject(*it.reject)
		return
	}
	e.dispatch(it.upd, it.recv)
}
