package hostile_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// A controller that stops reading while endpoints flap: each batch brings
// flapBatch new endpoints up and removes them again, so every one leaves a
// status the controller never reads. dpd's cap on unread statuses (16,384
// beyond one per live endpoint) is reached after about 17 batches;
// flapBatches is the most one controller sends (a build without the cap
// keeps taking them). stalledControllers controllers do it one after the
// other, each keeping its connection open unread.
const (
	flapBatch          = 1000
	flapBatches        = 60
	stalledControllers = 2
	// flapRSSBound: an idle dpd is ~21 MiB of RSS; a capped outbox of
	// ~17,000 statuses and their echoed endpoints adds ~35 MiB of heap
	// while it is live, and nothing once its session has ended, however
	// long its controller stays connected.
	flapRSSBound = 80 << 20
	flapLogBound = 60
)

// TestControllerStopsReading: controllers that never read their statuses
// while 1,000-endpoint batches come and go are ended with
// RESOURCE_EXHAUSTED once their unread statuses pass the cap; dpd's memory
// stays bounded though each keeps its connection open, it keeps answering,
// the endpoint applied before stays up, and a new controller session
// resyncs and is told exactly that endpoint.
func TestControllerStopsReading(t *testing.T) {
	d := startDaemon(t, nil)
	var stalled []*stalledController
	next := 1
	for i := range stalledControllers {
		c := stall(t, d, next, float64(i+1))
		next += c.used
		stalled = append(stalled, c)
		d.checkMemory(t, flapRSSBound)
		d.answers(t)
		checkUp(t, d, "web")
		if t.Failed() {
			return
		}
	}

	// Each stream ends with RESOURCE_EXHAUSTED once what was in flight is
	// read.
	for i, c := range stalled {
		read := 0
		var err error
		for {
			if _, err = c.st.Recv(); err != nil {
				break
			}
			read++
		}
		t.Logf("stalled controller %d finally read %d statuses in flight, then: %v", i+1, read, err)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "reconnect") {
			t.Errorf("stalled stream %d ended with %v, want ResourceExhausted saying to reconnect", i+1, err)
		}
		c.wait()
	}

	// A new controller session resyncs: it resends web, and is told that
	// web is up and nothing about the endpoints that came and went.
	st := controller(t, dial(t, d))
	for _, m := range []*felix.ToDataplane{wepUpdate("web", "caliweb", 0), inSync()} {
		must(t, st.Send(m))
	}
	var webUp, inSyncSeen bool
	for !webUp || !inSyncSeen {
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("new session: %v", err)
		}
		switch {
		case m.GetWorkloadEndpointStatusUpdate() != nil:
			u := m.GetWorkloadEndpointStatusUpdate()
			if id := u.GetId().GetWorkloadId(); id != "ns/web" {
				t.Errorf("new session told of %s (%s); only web was resent", id, u.GetStatus().GetStatus())
			} else {
				webUp = u.GetStatus().GetStatus() == "up"
			}
		case m.GetDataplaneInSync() != nil:
			inSyncSeen = true
		}
	}
	testutil.WaitFor(t, 30*time.Second, "only web left after the resync", func() bool { return len(listEndpoints(t, d)) == 1 })
	checkUp(t, d, "web")
	d.answers(t)
	d.checkMemory(t, flapRSSBound)
	d.checkLogLines(t, flapLogBound)
}

// stalledController is a Sync stream whose controller stopped reading.
type stalledController struct {
	st      dpdv1.Dataplane_SyncClient
	flapped int             // endpoints that came and went
	used    int             // endpoint numbers it took
	sends   []chan struct{} // closed when each batch's sends return
}

// wait waits for every send to return (a blocked one ends with the stream).
func (c *stalledController) wait() {
	for _, s := range c.sends {
		<-s
	}
}

// stall opens a controller session that sends web and InSync, then flaps
// batches of endpoints numbered from first without reading a status,
// until dpd_controller_behind_total reaches behind (dpd ended it) or
// flapBatches were sent.
func stall(t *testing.T, d *daemon, first int, behind float64) *stalledController {
	t.Helper()
	// Small fixed windows (no BDP growth): a controller that does not read
	// stops dpd's sends after 64 KiB, as a stalled controller's socket
	// would.
	conn := dial(t, d, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	c := &stalledController{st: controller(t, conn)}
	for _, m := range []*felix.ToDataplane{wepUpdate("web", "caliweb", 0), inSync()} {
		must(t, c.st.Send(m))
	}
	testutil.WaitFor(t, 30*time.Second, "web up", func() bool { return listEndpoints(t, d)["ns/web"].status == "up" })

	cut := func() bool { return d.metric("dpd_controller_behind_total") >= behind }
	send := func(msgs []*felix.ToDataplane) {
		done := make(chan struct{})
		c.sends = append(c.sends, done)
		go func() {
			defer close(done)
			for _, m := range msgs {
				if c.st.Send(m) != nil {
					return // the stream ended: checked by the caller
				}
			}
		}()
	}
	// Each phase waits for its sends to be applied (dpd_happy_endpoints) or
	// for dpd to end the session; once ended, dpd reads no more, so a send
	// may block until the stream is drained.
	batches := 0
	for ; batches < flapBatches && !cut(); batches++ {
		ups, downs := make([]*felix.ToDataplane, flapBatch), make([]*felix.ToDataplane, flapBatch)
		for j := range flapBatch {
			n := first + batches*flapBatch + j
			name := fmt.Sprintf("f%d", n)
			ups[j] = wepUpdate(name, fmt.Sprintf("calf%d", n), n)
			downs[j] = wepRemove(name)
		}
		send(ups)
		testutil.WaitFor(t, 30*time.Second, "a batch up or the controller cut off", func() bool {
			return cut() || d.metric("dpd_happy_endpoints") == flapBatch+1
		})
		if cut() {
			break
		}
		send(downs)
		testutil.WaitFor(t, 30*time.Second, "a batch removed or the controller cut off", func() bool {
			return cut() || d.metric("dpd_happy_endpoints") == 1
		})
		c.flapped += flapBatch
	}
	c.used = (batches + 1) * flapBatch
	t.Logf("stalled controller %.0f: %d batches, %d endpoints came and went unread; dpd_controller_behind_total %v",
		behind, batches, c.flapped, d.metric("dpd_controller_behind_total"))
	if !cut() {
		t.Errorf("%d endpoints came and went while the controller read nothing, and dpd did not end its session", c.flapped)
	}
	return c
}
