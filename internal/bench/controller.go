package bench

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/dpd-dev/dpd/client"
	"github.com/dpd-dev/dpd/proto/felix"
)

// controller is the driver's controller: a client.Session, as a real one
// would use it, plus a tracker that timestamps what dpd reports back.
type controller struct {
	sess *client.Session
	tr   *tracker

	mu        sync.Mutex
	firstSent time.Time // when the session first asked for the snapshot; guarded by mu
	connects  int       // snapshot requests, one per stream; guarded by mu
}

// connect starts a session whose snapshot is snap, reporting to tr. The
// session calls the snapshot function right before it sends the first
// message of a stream, which is where cold-start timing begins.
func connect(c *client.Client, snap []*felix.ToDataplane, tr *tracker) *controller {
	ctl := &controller{tr: tr}
	ctl.sess = client.NewSession(c, func() []*felix.ToDataplane {
		ctl.mu.Lock()
		defer ctl.mu.Unlock()
		ctl.connects++
		if ctl.connects == 1 {
			ctl.firstSent = time.Now()
		}
		return snap
	}, client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	go ctl.tr.run(ctl.sess.Statuses())
	return ctl
}

// started is when the first message was about to be sent.
func (c *controller) started() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstSent
}

// healthy fails when the stream had to be re-established: a replay would
// make every figure meaningless.
func (c *controller) healthy() error {
	c.mu.Lock()
	n := c.connects
	c.mu.Unlock()
	if n > 1 {
		return fmt.Errorf("the controller stream was re-established %d times: dpd dropped the session", n-1)
	}
	if err := c.sess.Err(); err != nil {
		return fmt.Errorf("controller session ended: %w", err)
	}
	return nil
}

// send sends msgs in order.
func (c *controller) send(msgs ...*felix.ToDataplane) error {
	for _, m := range msgs {
		if err := c.sess.Send(m); err != nil {
			return fmt.Errorf("send %T: %w", m.GetPayload(), err)
		}
	}
	return nil
}

func (c *controller) close() { _ = c.sess.Close() }
