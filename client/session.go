package client

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrClosed is returned by Send after Close.
var ErrClosed = errors.New("session closed")

// Session is a controller stream that survives dpd restarts. It sends the
// snapshot, then InSync, then whatever the caller Sends. When the stream
// fails it reconnects with exponential backoff and replays the caller's
// current desired state: snapshot() called again, with everything sent
// with Send since the session began folded on top (Send wins per object),
// then InSync. Sequence numbers are assigned by the session and increase
// across reconnects.
//
// A stream that ends with codes.Aborted (another controller took over) or
// codes.Unimplemented ends the session: fighting a newer controller would
// only make both flap.
type Session struct {
	client     *Client
	snapshot   func() []*felix.ToDataplane
	log        *slog.Logger
	backoffMin time.Duration
	backoffMax time.Duration

	statuses chan *felix.FromDataplane
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{} // closed when run returns

	mu      sync.Mutex
	desired *desired                   // guarded by mu: what Send recorded
	seq     uint64                     // guarded by mu: last sequence number sent
	stream  dpdv1.Dataplane_SyncClient // guarded by mu: live stream after its replay; nil otherwise
	err     error                      // guarded by mu: why the session ended
}

// SessionOption configures NewSession.
type SessionOption func(*Session)

// WithBackoff bounds the delay between reconnects (default 100 ms .. 5 s).
func WithBackoff(minDelay, maxDelay time.Duration) SessionOption {
	return func(s *Session) { s.backoffMin, s.backoffMax = minDelay, maxDelay }
}

// WithLogger logs reconnects to l (default slog.Default()).
func WithLogger(l *slog.Logger) SessionOption { return func(s *Session) { s.log = l } }

// NewSession starts a controller session on c. snapshot returns the
// complete state to send before InSync; it is called on every (re)connect,
// must not call Send, and may be nil for an empty snapshot. The session
// copies the snapshot's messages.
func NewSession(c *Client, snapshot func() []*felix.ToDataplane, opts ...SessionOption) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		client: c, snapshot: snapshot, log: slog.Default(),
		backoffMin: 100 * time.Millisecond, backoffMax: 5 * time.Second,
		statuses: make(chan *felix.FromDataplane, 256),
		ctx:      ctx, cancel: cancel, done: make(chan struct{}),
		desired: newDesired(),
	}
	for _, o := range opts {
		o(s)
	}
	go s.run()
	return s
}

// Statuses carries what dpd reports, from every stream in turn; it is
// closed when the session ends (then Err says why). Read it: when it is
// full the stream stops reading and dpd's statuses queue up behind it.
func (s *Session) Statuses() <-chan *felix.FromDataplane { return s.statuses }

// Send records msg in the desired state and sends it on the live stream.
// While reconnecting it only records: the replay carries it. The session
// owns msg afterwards (it sets the sequence number). InSync is the
// session's to send and is refused.
func (s *Session) Send(msg *felix.ToDataplane) error {
	if msg.GetInSync() != nil {
		return errors.New("InSync is sent by the session after each replay")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.desired.record(msg)
	if s.stream == nil {
		return nil
	}
	if err := s.sendLocked(s.stream, msg); err != nil {
		// The receiver sees the stream's status and reconnects; msg is in
		// the desired state, so the replay delivers it.
		s.stream = nil
	}
	return nil
}

// Err is why the session ended: ErrClosed after Close, or the stream's
// final status. nil while it runs.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session and its stream. dpd keeps enforcing the last
// state.
func (s *Session) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *Session) sendLocked(stream dpdv1.Dataplane_SyncClient, msg *felix.ToDataplane) error {
	s.seq++
	msg.SequenceNumber = s.seq
	return stream.Send(msg)
}

func (s *Session) run() {
	defer close(s.done)
	defer close(s.statuses)
	delay := s.backoffMin
	for {
		served, err := s.connectAndServe()
		if s.ctx.Err() != nil {
			s.finish(ErrClosed)
			return
		}
		if c := status.Code(err); c == codes.Aborted || c == codes.Unimplemented {
			s.log.Warn("controller session ended by dpd", "err", err)
			s.finish(err)
			return
		}
		if served { // it worked for a while: start the backoff over
			delay = s.backoffMin
		}
		wait := delay/2 + rand.N(delay/2+1) // jitter so many clients do not stampede
		s.log.Warn("controller stream failed; reconnecting", "err", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-s.ctx.Done():
			s.finish(ErrClosed)
			return
		}
		delay = min(2*delay, s.backoffMax)
	}
}

// connectAndServe opens a stream, replays and sends InSync, then pumps
// statuses until the stream fails or the session is closed. served says
// whether the replay got through.
func (s *Session) connectAndServe() (served bool, err error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	stream, err := s.client.Dataplane().Sync(ctx)
	if err != nil {
		return false, err
	}
	// Outside mu: Sends meanwhile are recorded and win over the snapshot.
	var snap []*felix.ToDataplane
	if s.snapshot != nil {
		snap = s.snapshot()
	}
	var recvErr error
	recvDone := make(chan struct{})
	go func() { defer close(recvDone); recvErr = s.receive(stream) }()
	if err := s.replay(stream, snap); err != nil {
		// A failed Send means the stream is done; Recv has its status
		// (Aborted must not be mistaken for a plain failure).
		<-recvDone
		return false, cmp.Or(recvErr, err)
	}
	<-recvDone // the stream ended, or the session was closed
	s.mu.Lock()
	if s.stream == stream {
		s.stream = nil
	}
	s.mu.Unlock()
	return true, recvErr
}

// replay sends the desired state and InSync, then makes stream live for
// Send. mu is held throughout so no Send overtakes the replay.
func (s *Session) replay(stream dpdv1.Dataplane_SyncClient, snap []*felix.ToDataplane) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.desired.replay(snap) {
		if err := s.sendLocked(stream, m); err != nil {
			return err
		}
	}
	if err := s.sendLocked(stream, &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}); err != nil {
		return err
	}
	s.stream = stream
	return nil
}

// receive forwards statuses until the stream ends (closing the session
// cancels it), so it always returns the stream's final status.
func (s *Session) receive(stream dpdv1.Dataplane_SyncClient) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		select {
		case s.statuses <- m:
		case <-s.ctx.Done():
			return ErrClosed
		}
	}
}

func (s *Session) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stream = nil
	s.err = err
}
