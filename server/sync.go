package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/dpd-dev/dpd/dataplane/engine"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Why a Sync stream ended, as the status the controller sees.
var (
	errSuperseded   = status.Error(codes.Aborted, "superseded by a newer controller session")
	errShuttingDown = status.Error(codes.Unavailable, "dpd is shutting down")
	errSessionEnded = status.Error(codes.Unavailable, "the engine ended the session")
	errClientDone   = errors.New("controller closed its send side")
)

// syncService implements dpd.v1.Dataplane. One controller is active: a new
// Sync takes over and the older stream ends with codes.Aborted, so a
// controller that restarts is never locked out by a half-dead old stream.
type syncService struct {
	dpdv1.UnimplementedDataplaneServer
	engine Engine
	log    *slog.Logger

	// pipeMode: Felix drives dpd over its pipe; a gRPC controller would
	// take over from it, so Sync is refused.
	pipeMode bool

	mu       sync.Mutex
	active   *controllerConn // guarded by mu: the newest Sync stream
	draining bool            // guarded by mu: no new sessions
}

// controllerConn is one Sync stream's handle for a successor.
type controllerConn struct {
	cancel context.CancelCauseFunc
	// released is closed once this stream's engine session is closed (or
	// was never opened): the engine allows one session at a time.
	released chan struct{}
}

func newSyncService(eng Engine, log *slog.Logger) *syncService {
	return &syncService{engine: eng, log: log}
}

// Sync serves one controller stream until it ends, is superseded, or the
// server drains.
func (s *syncService) Sync(stream dpdv1.Dataplane_SyncServer) error {
	if s.pipeMode {
		return status.Error(codes.FailedPrecondition, "dpd runs as Felix's dataplane driver (--felix-pipe); the controller is on the pipe")
	}
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	conn := &controllerConn{cancel: cancel, released: make(chan struct{})}
	prev, err := s.takeOver(conn)
	if err != nil {
		close(conn.released)
		return err
	}
	defer s.forget(conn)
	if prev != nil {
		// Wait even if we are superseded meanwhile: our successor waits for
		// us, so the chain keeps at most one engine session open.
		prev.cancel(errSuperseded)
		<-prev.released
	}
	if ctx.Err() != nil { // superseded or gone while waiting
		close(conn.released)
		return streamEnd(ctx)
	}

	peerName := peerName(ctx)
	sess := s.engine.NewSession(peerName)
	log := s.log.With("session", sess.ID(), "peer", peerName)
	st := &syncStream{stream: stream, sess: sess, in: newInbound(sess, log), ctx: ctx, cancel: cancel, log: log}
	st.log.Info("controller session started")

	forwarded := make(chan struct{})
	go func() { defer close(forwarded); st.forward() }()
	// The receiver is not waited for: it may sit in Recv until this
	// handler returns, which is what ends the stream.
	go st.receive()

	<-ctx.Done()
	st.closeSession()
	close(conn.released)
	<-forwarded
	err = streamEnd(ctx)
	st.log.Info("controller session ended", "reason", context.Cause(ctx))
	return err
}

// takeOver makes conn the active stream and returns the one it replaces.
func (s *syncService) takeOver(conn *controllerConn) (*controllerConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return nil, errShuttingDown
	}
	prev := s.active
	s.active = conn
	return prev, nil
}

func (s *syncService) forget(conn *controllerConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == conn {
		s.active = nil
	}
}

// drain ends the active stream with codes.Unavailable and refuses new
// ones: a long-lived Sync would otherwise hold GracefulStop to its deadline.
func (s *syncService) drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = true
	if s.active != nil {
		s.active.cancel(errShuttingDown)
	}
}

// streamEnd maps why ctx ended to the status returned to the controller.
func streamEnd(ctx context.Context) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errClientDone):
		return nil
	case errors.Is(cause, context.Canceled), errors.Is(cause, context.DeadlineExceeded):
		return status.FromContextError(cause).Err()
	}
	return cause
}

func peerName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	if a := p.Addr.String(); a != "" && a != "@" {
		return p.Addr.Network() + ":" + a
	}
	return p.Addr.Network()
}

// syncStream is one Sync stream bound to its engine session.
type syncStream struct {
	stream dpdv1.Dataplane_SyncServer
	sess   engine.Session
	in     *inbound
	ctx    context.Context
	cancel context.CancelCauseFunc
	log    *slog.Logger

	// mu serialises Submit/Reject with Close, so nothing reaches a session
	// after it is closed and a successor's session has begun.
	mu     sync.Mutex
	closed bool // guarded by mu
}

func (st *syncStream) closeSession() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	st.sess.Close()
}

// receive hands each message to the engine through st.in: translated and
// submitted, or logged and rejected; the stream stays up.
func (st *syncStream) receive() {
	for {
		msg, err := st.stream.Recv()
		if errors.Is(err, io.EOF) {
			st.cancel(errClientDone)
			return
		}
		if err != nil {
			st.cancel(err)
			return
		}
		if err := st.handle(msg); err != nil {
			st.cancel(err)
			return
		}
	}
}

func (st *syncStream) handle(msg *felix.ToDataplane) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return context.Cause(st.ctx)
	}
	return st.in.submit(st.ctx, msg)
}

// forward streams the session's statuses to the controller.
func (st *syncStream) forward() {
	out := st.sess.Out()
	for {
		select {
		case m, ok := <-out:
			if !ok {
				st.cancel(errSessionEnded)
				return
			}
			st.in.echo.fill(m)
			if err := st.stream.Send(m); err != nil {
				st.cancel(err)
				return
			}
		case <-st.ctx.Done():
			return
		}
	}
}
