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
}

// errPipeClosed marks the end of fd 3 (Felix closed it or is gone).
var errPipeClosed = errors.New("felix closed the pipe")

// run serves the pipe until fd 3 ends (nil: a clean stop that leaves the
// kernel state for the next start to adopt), writing fails, or ctx ends.
func (p *pipeController) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sess := p.engine.NewSession("felix-pipe")
	p.log.Info("felix pipe session started", "session", sess.ID())
	defer sess.Close()

	in := newInbound(sess, p.log)
	fw := felixpipe.NewWriter(p.out)
	go func() {
		for m := range sess.Out() {
			in.echo.fill(m)
			if err := fw.Write(m); err != nil {
				cancel(fmt.Errorf("write to felix: %w", err))
				return
			}
		}
	}()
	go func() { cancel(p.read(ctx, in)) }()

	<-ctx.Done()
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

// read hands every frame on p.in to the engine through in; a frame that
// does not decode is rejected like any invalid message and reading goes on.
func (p *pipeController) read(ctx context.Context, in *inbound) error {
	fr := felixpipe.NewReader(p.in, p.maxFrame)
	for {
		msg := &felix.ToDataplane{}
		err := fr.Read(msg)
		var de *felixpipe.DecodeError
		switch {
		case err == nil:
			err = in.submit(ctx, msg)
		case errors.As(err, &de):
			err = in.rejectUndecodable(ctx, err)
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrClosed):
			return errPipeClosed
		default:
			return fmt.Errorf("read from felix: %w", err)
		}
		if err != nil {
			return fmt.Errorf("submit: %w", err)
		}
	}
}

// close interrupts a pending read.
func (p *pipeController) close() {
	_ = p.in.Close()
}
