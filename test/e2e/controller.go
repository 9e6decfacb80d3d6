package e2e

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Timeouts for what the controller waits on.
const (
	statusTimeout  = 20 * time.Second
	barrierTimeout = 5 * time.Second
)

var barrierSeq atomic.Uint32

// Controller plays the calc graph through the client library's Session:
// the snapshot and InSync on connect, then updates in order, and records
// the statuses that come back.
//
// The Session reconnects and replays on its own, which could hide a daemon
// that drops the stream; a second DataplaneInSync (one per stream) is how
// the Controller notices, and it fails the test.
type Controller struct {
	sess *client.Session

	// Explain, when set, describes dpd's own view for failure messages.
	Explain func() string

	mu          sync.Mutex
	status      map[string]endpointStatus // by endpointKey; guarded by mu
	inSyncCount int                       // DataplaneInSync messages seen; guarded by mu
	changed     chan struct{}             // closed and replaced on every message; guarded by mu
}

type endpointStatus struct {
	status  string
	removed bool
}

// Connect starts a controller session whose snapshot is snapshot (InSync is
// the session's to send). t.Cleanup closes it, and fails t if the stream had
// to be re-established meanwhile.
func (d *Daemon) Connect(t testing.TB, snapshot []*felix.ToDataplane) *Controller {
	t.Helper()
	c := &Controller{status: map[string]endpointStatus{}, changed: make(chan struct{})}
	c.sess = client.NewSession(d.Client(t), func() []*felix.ToDataplane { return snapshot })
	c.Explain = d.ExplainEndpoints
	done := make(chan struct{})
	go c.recvLoop(done)
	t.Cleanup(func() {
		_ = c.sess.Close()
		<-done // Close ends the session, which closes Statuses
		if n := c.streams(); n > 1 {
			t.Errorf("the controller stream was established %d times: dpd dropped the session", n)
		}
	})
	return c
}

func (c *Controller) recvLoop(done chan<- struct{}) {
	defer close(done)
	defer func() { // wake waiters: the session has ended
		c.mu.Lock()
		c.notifyLocked()
		c.mu.Unlock()
	}()
	for msg := range c.sess.Statuses() {
		c.mu.Lock()
		switch {
		case msg.GetWorkloadEndpointStatusUpdate() != nil:
			u := msg.GetWorkloadEndpointStatusUpdate()
			c.status[endpointKey(u.GetId())] = endpointStatus{status: u.GetStatus().GetStatus()}
		case msg.GetWorkloadEndpointStatusRemove() != nil:
			k := endpointKey(msg.GetWorkloadEndpointStatusRemove().GetId())
			c.status[k] = endpointStatus{removed: true}
		case msg.GetHostEndpointStatusUpdate() != nil:
			u := msg.GetHostEndpointStatusUpdate()
			c.status[hostKey(u.GetId().GetEndpointId())] = endpointStatus{status: u.GetStatus().GetStatus()}
		case msg.GetHostEndpointStatusRemove() != nil:
			c.status[hostKey(msg.GetHostEndpointStatusRemove().GetId().GetEndpointId())] = endpointStatus{removed: true}
		case msg.GetDataplaneInSync() != nil:
			c.inSyncCount++
		}
		c.notifyLocked()
		c.mu.Unlock()
	}
}

// notifyLocked wakes every await (after the state it waits on changed).
func (c *Controller) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Controller) streams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inSyncCount
}

// Send sends msgs in order; the session numbers them and owns them after.
func (c *Controller) Send(t testing.TB, msgs ...*felix.ToDataplane) {
	t.Helper()
	for _, m := range msgs {
		if err := c.sess.Send(m); err != nil {
			t.Fatalf("send %T: %v", m.GetPayload(), err)
		}
	}
}

// Status is the last status reported for id ("" when none yet).
func (c *Controller) Status(id *felix.WorkloadEndpointID) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.status[endpointKey(id)]
	return s.status, ok && !s.removed
}

// await blocks until condLocked (called with mu held) holds, the session
// ends, or timeout passes; it wakes on every status message, never polls.
func (c *Controller) await(timeout time.Duration, condLocked func() bool) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		c.mu.Lock()
		ok, changed := condLocked(), c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		if c.sess.Err() != nil {
			return false
		}
		select {
		case <-changed:
		case <-timer.C:
			return false
		}
	}
}

// mustAwait is await that fails t with what was reported so far.
func (c *Controller) mustAwait(t testing.TB, what string, condLocked func() bool) {
	t.Helper()
	if c.await(statusTimeout, condLocked) {
		return
	}
	detail := ""
	if c.Explain != nil {
		detail = "; dpd says: " + c.Explain()
	}
	t.Fatalf("no %s within %s (session: %v; statuses: %s%s)",
		what, statusTimeout, c.sess.Err(), c.Summary(), detail)
}

// WaitInSync waits for DataplaneInSync.
func (c *Controller) WaitInSync(t testing.TB) {
	t.Helper()
	c.mustAwait(t, "DataplaneInSync", func() bool { return c.inSyncCount > 0 })
}

// WaitStatus waits until every id has reported want.
func (c *Controller) WaitStatus(t testing.TB, want string, ids ...*felix.WorkloadEndpointID) {
	t.Helper()
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = endpointKey(id)
	}
	c.mustAwait(t, fmt.Sprintf("status %q for %s", want, strings.Join(keys, ", ")), func() bool {
		for _, k := range keys {
			if s := c.status[k]; s.removed || s.status != want {
				return false
			}
		}
		return true
	})
}

// WaitRemoved waits for WorkloadEndpointStatusRemove of id.
func (c *Controller) WaitRemoved(t testing.TB, id *felix.WorkloadEndpointID) {
	t.Helper()
	k := endpointKey(id)
	c.mustAwait(t, "status removal of "+k, func() bool { return c.status[k].removed })
}

// Barrier returns once dpd has applied everything sent before it. It adds an
// endpoint whose interface does not exist and waits for any status of it:
// the engine applies its inbox in order, so that status comes from an apply
// that also covered every earlier message. The endpoint is then removed.
// It reports false (and the caller falls back on eventual probes) when no
// status arrives within barrierTimeout.
func (c *Controller) Barrier(t testing.TB) bool {
	t.Helper()
	n := barrierSeq.Add(1)
	id := &felix.WorkloadEndpointID{
		OrchestratorId: "k8s",
		WorkloadId:     fmt.Sprintf("e2e-barrier/b%d", n),
		EndpointId:     "eth0",
	}
	iface := fmt.Sprintf("calib%d%d", os.Getpid()%1000, n)
	c.Send(t, &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{
		WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
			Id: id,
			Endpoint: &felix.WorkloadEndpoint{
				State: "active", Name: iface, Mac: "ee:ee:ee:ee:ee:ee",
				Ipv4Nets: []string{fmt.Sprintf("10.65.255.%d/32", n%250+1)},
			},
		},
	}})
	k := endpointKey(id)
	seen := c.await(barrierTimeout, func() bool {
		_, ok := c.status[k]
		return ok
	})
	c.Send(t, WorkloadEndpointRemove(id))
	if !seen {
		t.Logf("barrier: no status for %s within %s; relying on eventual probes", k, barrierTimeout)
	}
	return seen
}

// Summary lists the statuses seen so far, for failure messages.
func (c *Controller) Summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.summaryLocked()
}

func (c *Controller) summaryLocked() string {
	var parts []string
	for k, s := range c.status {
		v := s.status
		if s.removed {
			v = "(removed)"
		}
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func endpointKey(id *felix.WorkloadEndpointID) string {
	return id.GetOrchestratorId() + "/" + id.GetWorkloadId() + "/" + id.GetEndpointId()
}
