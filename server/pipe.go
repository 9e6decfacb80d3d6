package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixpipe"
	"github.com/dpd-dev/dpd/server/felixwire"
)

// Felix passes its driver the pipe it writes to as fd 3 and the one it
// reads from as fd 4.
const (
	felixPipeInFD  = 3
	felixPipeOutFD = 4
)

// openFelixPipe wraps fds 3 and 4. They are made non-blocking first so the
// runtime poller serves them and closing fd 3 interrupts a pending read.
func openFelixPipe() (io.ReadCloser, io.WriteCloser, error) {
	for _, fd := range []int{felixPipeInFD, felixPipeOutFD} {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return nil, nil, fmt.Errorf("--felix-pipe: fd %d is not open (Felix passes its pipes as fds 3 and 4): %w", fd, err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			return nil, nil, fmt.Errorf("--felix-pipe: fd %d: %w", fd, err)
		}
	}
	return os.NewFile(felixPipeInFD, "felix-to-dpd"), os.NewFile(felixPipeOutFD, "dpd-to-felix"), nil
}

// pipeController is Felix on the other end of the pipes: one engine
// session fed from the frames on in, its statuses framed onto out.
type pipeController struct {
	engine   Engine
	in       io.ReadCloser
	out      io.WriteCloser
	maxFrame int
	log      *slog.Logger
	wireMet  *felixwire.Metrics // nil: not counted
	// extensions: also send what Felix's reader does not handle
	// (DataplaneInSync, dpd's extensions); see forFelix.
	extensions bool
}

// errPipeClosed marks the end of fd 3 (Felix closed it or is gone).
var errPipeClosed = errors.New("felix closed the pipe")

// errPipeSessionEnded: the engine closed the pipe's session (it stopped,
// or Felix fell behind on its statuses).
var errPipeSessionEnded = errors.New("the engine ended the felix pipe session")

// run serves the pipe until fd 3 ends (nil: a clean stop that leaves the
// kernel state for the next start to adopt), writing fails, or ctx ends.
func (p *pipeController) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sess := p.engine.NewSession("felix-pipe")
	p.log.Info("felix pipe session started", "session", sess.ID())
	defer sess.Close()

	fw := felixpipe.NewWriter(p.out)
	statuses := newFelixStatuses()
	in := newInbound(sess, statuses, p.log.With("session", sess.ID()))
	go func() {
		for m := range sess.Out() {
			fm, err := statuses.encode(m)
			if err != nil {
				cancel(err)
				return
			}
			if fm = forFelix(fm, p.extensions); fm == nil {
				continue
			}
			if err := fw.Write(fm); err != nil {
				cancel(fmt.Errorf("write to felix: %w", err))
				return
			}
		}
	}()
	go func() { cancel(p.read(ctx, in)) }()

	select {
	case <-ctx.Done():
	case <-sess.Done():
		cancel(errPipeSessionEnded)
	}
	if serr := sess.Err(); serr != nil {
		// Felix restarts its driver when it exits; the new session resyncs.
		p.log.Error("ending the felix pipe session; exiting so that felix restarts dpd and resyncs", "reason", serr)
		return fmt.Errorf("felix pipe: %w", serr)
	}
	err := context.Cause(ctx)
	switch {
	case errors.Is(err, errPipeClosed):
		p.log.Info("felix closed the pipe; stopping, kernel state stays for the next start")
		return nil
	case errors.Is(err, context.Canceled):
		return nil // asked to stop
	}
	return err
}

// read decodes every frame on in at the wire edge (either Felix
// generation) and submits it; an invalid message is rejected like any
// other and reading goes on. A frame that does not decode and names no
// endpoint stops the pipe with an error: dpd exits, Felix (which stops
// when its driver does) is restarted and sends its whole state again to a
// dpd that adopts the kernel state without dropping a packet.
func (p *pipeController) read(ctx context.Context, in *inbound) error {
	fr := felixpipe.NewReader(p.in, p.maxFrame)
	wire := newWireIn(p.wireMet, "pipe", in.log)
	sink := wireSink{
		submit:     func(m *felix.ToDataplane) error { return in.submit(ctx, m) },
		reject:     func(m *felix.ToDataplane, reason error) error { return in.reject(ctx, m, reason) },
		generation: in.generation,
	}
	for {
		b, err := fr.ReadFrame()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrClosed):
			return errPipeClosed
		default:
			return fmt.Errorf("read from felix: %w", err)
		}
		if err := wire.take(b, sink); err != nil {
			var rs *errResync
			if errors.As(err, &rs) {
				return fmt.Errorf("felix pipe: %w (exiting so that Felix restarts and resends its state)", rs)
			}
			return fmt.Errorf("submit: %w", err)
		}
	}
}

// close interrupts a pending read.
func (p *pipeController) close() {
	_ = p.in.Close()
}
