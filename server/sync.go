package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/dpd-dev/dpd/dataplane/engine"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixwire"
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
	wireMet  *felixwire.Metrics // nil: not counted

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
	statuses := newFelixStatuses()
	st := &syncStream{stream: stream, sess: sess, in: newInbound(sess, statuses, log), statuses: statuses,
		ctx: ctx, cancel: cancel, log: log}
	st.wire = newWireIn(s.wireMet, "grpc", st.log)
	st.log.Info("controller session started")

	forwarded := make(chan struct{})
	go func() { defer close(forwarded); st.forward() }()
	// The receiver is not waited for: it may sit in Recv until this
	// handler returns, which is what ends the stream.
	go st.receive()

	select {
	case <-ctx.Done():
	case <-sess.Done():
		// Ended by the engine: forward may sit in a Send the controller
		// does not read, so only returning ends the stream.
		cancel(st.ended(errSessionEnded))
	}
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
	wire   *wireIn // owned by receive
	// statuses encodes what forward sends; handle shows it what arrives.
	statuses *felixStatuses

	// mu serialises Submit/Reject with Close, so nothing reaches a session
	// after it is closed and a successor's session has begun.
	mu     sync.Mutex
	closed bool // guarded by mu
}

// closeSession also drops the endpoints kept for status echoes: the
// handler lives on while forward sits in a Send to a controller that does
// not read, and each such stream must not keep a session's worth of them.
func (st *syncStream) closeSession() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	st.sess.Close()
	st.statuses.release()
}

// receive decodes each message at the wire edge (either Felix
// generation) and hands it to the engine: valid ones are submitted,
// invalid ones logged and rejected (the engine counts them in
// dpd_invalid_messages_total and errors their endpoint); the stream stays
// up. A message that does not decode and names no endpoint ends the
// stream with InvalidArgument, so the controller resyncs.
func (st *syncStream) receive() {
	sink := wireSink{submit: st.handle, reject: st.reject, generation: st.in.generation}
	var msg decoded
	// Not the generated Recv: the wire edge decodes, in the codec's call,
	// from gRPC's own buffer (see rawFrame).
	raw := rawFrame{use: func(b []byte) { msg = st.wire.decode(b) }}
	for {
		msg = decoded{}
		err := st.stream.RecvMsg(&raw)
		if errors.Is(err, io.EOF) {
			st.cancel(errClientDone)
			return
		}
		if err != nil && isUnmarshalError(err) {
			err = st.wire.undecodable(err)
		} else if err == nil {
			err = st.wire.deliver(msg, sink)
		}
		if err != nil {
			var rs *errResync
			if errors.As(err, &rs) {
				err = status.Error(codes.InvalidArgument, rs.Error())
			}
			st.cancel(st.ended(err))
			return
		}
	}
}

// isUnmarshalError reports whether a RecvMsg error is grpc's failure to
// unmarshal the message (codes.Internal), not a transport failure: only
// on a server built without rawCodecOption.
func isUnmarshalError(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Internal && strings.Contains(s.Message(), "unmarshal")
}

func (st *syncStream) reject(msg *felix.ToDataplane, reason error) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return context.Cause(st.ctx)
	}
	return st.in.reject(st.ctx, msg, reason)
}

func (st *syncStream) handle(msg *felix.ToDataplane) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return context.Cause(st.ctx)
	}
	return st.in.submit(st.ctx, msg)
}

// ended is why the stream ends when the session refused a message or
// closed its statuses: the engine's reason if it ended the session, else
// err. A controller that fell behind gets ResourceExhausted and resyncs
// on its next stream.
func (st *syncStream) ended(err error) error {
	serr := st.sess.Err()
	switch {
	case serr == nil:
		return err
	case errors.Is(serr, engine.ErrControllerBehind):
		return status.Error(codes.ResourceExhausted, serr.Error()+"; reconnect to resync")
	}
	return status.Error(codes.Unavailable, serr.Error())
}

// forward streams the session's statuses to the controller.
func (st *syncStream) forward() {
	out := st.sess.Out()
	for {
		select {
		case m, ok := <-out:
			if !ok {
				st.cancel(st.ended(errSessionEnded))
				return
			}
			fm, err := st.statuses.encode(m)
			if err != nil {
				st.cancel(status.Error(codes.Internal, err.Error()))
				return
			}
			if err := st.stream.Send(fm); err != nil {
				st.cancel(err)
				return
			}
		case <-st.ctx.Done():
			return
		}
	}
}
