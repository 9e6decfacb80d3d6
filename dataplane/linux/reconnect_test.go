package linux

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// The engine on top of the Linux kernel: a controller that reconnects with
// the same snapshot, or a dpd that restarts and gets it again, must cost
// the kernel nothing, and a controller that goes away must leave the
// dataplane enforcing.

// snapshot describes open (allow-all) and closed (ingress denied)
// workloads, as a controller would send them.
func snapshot(open []*testutil.Workload, closed []*testutil.Workload) []*felix.ToDataplane {
	allow := []*felix.Rule{{Action: "allow"}}
	msgs := []*felix.ToDataplane{
		{Payload: &felix.ToDataplane_ConfigUpdate{ConfigUpdate: &felix.ConfigUpdate{Config: map[string]string{"InterfacePrefix": testPrefix}}}},
		{Payload: &felix.ToDataplane_ActiveProfileUpdate{ActiveProfileUpdate: &felix.ActiveProfileUpdate{
			Id: &felix.ProfileID{Name: "open"}, Profile: &felix.Profile{InboundRules: allow, OutboundRules: allow}}}},
		{Payload: &felix.ToDataplane_ActiveProfileUpdate{ActiveProfileUpdate: &felix.ActiveProfileUpdate{
			Id: &felix.ProfileID{Name: "closed"}, Profile: &felix.Profile{OutboundRules: allow}}}},
	}
	add := func(w *testutil.Workload, n int, profile string) {
		msgs = append(msgs, &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
			Id: &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: fmt.Sprintf("ns/p%d", n), EndpointId: "eth0"},
			Endpoint: &felix.WorkloadEndpoint{State: "active", Name: w.HostIface, ProfileIds: []string{profile},
				Ipv4Nets: []string{w.IP + "/32"}},
		}}})
	}
	for i, w := range open {
		add(w, i, "open")
	}
	for i, w := range closed {
		add(w, 100+i, "closed")
	}
	return msgs
}

// engineOn runs an engine over k until stop is called (or the test ends).
func engineOn(t *testing.T, k *Kernel) (*engine.Engine, func()) {
	t.Helper()
	e := engine.New(engine.Options{Kernel: k, Name: "linux", Log: quietLog(),
		ApplyInterval: time.Millisecond, ApplyBurst: 100, RetryMin: 5 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := e.Run(ctx); err != nil {
			t.Errorf("engine: %v", err)
		}
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return e, stop
}

// connect starts a session that sends msgs and InSync, and waits until the
// engine has applied it and reports the dataplane in sync.
func connect(t *testing.T, e *engine.Engine, msgs []*felix.ToDataplane) engine.Session {
	t.Helper()
	s := e.NewSession("test")
	go func() {
		for range s.Out() {
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, m := range append(msgs, &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}) {
		u, err := felixconv.Translate(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the dataplane in sync", func() bool {
		st := e.Status()
		return st.DataplaneInSync && st.Errored == 0 && st.Dirty == 0
	})
	return s
}

// TestReconnectAndRestartWriteNothing: with traffic flowing at 100 pps,
// the controller goes away (enforcement stays, nothing is written), comes
// back with the same snapshot (nothing is written), and then dpd itself
// restarts and gets the same snapshot (nothing is written, nothing lost).
func TestReconnectAndRestartWriteNothing(t *testing.T) {
	pin := newPinDir(t)
	k1 := openKernel(t, pin)
	a, b, c := newWorkload(t, "10.77.5.1"), newWorkload(t, "10.77.5.2"), newWorkload(t, "10.77.5.3")
	snap := snapshot([]*testutil.Workload{a, b}, []*testutil.Workload{c})
	e1, stop1 := engineOn(t, k1)
	s1 := connect(t, e1, snap)
	testutil.WaitFor(t, 5*time.Second, "a pings b", func() bool { return pingsQuick(a, b.IP) })
	if pingsQuick(a, c.IP) {
		t.Fatal("c's ingress is closed, yet a reached it")
	}

	flood := a.StartPing(b.IP, 600)
	waitFlowing(t, k1)
	ops0 := k1.Ops()

	// The controller goes away: everything stays.
	s1.Close()
	mustNil(t, e1.Flush(context.Background()))
	if !pingsQuick(b, a.IP) || pingsQuick(a, c.IP) {
		t.Error("enforcement changed after the controller went away")
	}
	// It reconnects with the same snapshot.
	s2 := connect(t, e1, snap)
	if ops := k1.Ops().Sub(ops0); ops.Writes() != 0 || ops.FailClosed != 0 {
		t.Errorf("controller reconnect with the same snapshot wrote: %+v", ops)
	}

	// dpd restarts: engine and kernel go, new ones adopt.
	s2.Close()
	stop1()
	mustNil(t, k1.Close())
	k2 := openKernel(t, pin)
	before := k2.Ops()
	e2, _ := engineOn(t, k2)
	connect(t, e2, snap)
	if ops := k2.Ops().Sub(before); ops.Writes() != 0 || ops.FailClosed != 0 {
		t.Errorf("restart with the same snapshot wrote: %+v", ops)
	} else {
		t.Logf("restart: %+v", ops)
	}
	if sent, recv := flood.Wait(t, pingTimeout); recv != sent {
		t.Errorf("100 pps ping across disconnect, reconnect and restart: %d sent, %d received, %d lost", sent, recv, sent-recv)
	} else {
		t.Logf("100 pps ping across disconnect, reconnect and restart: %d sent, %d received", sent, recv)
	}
	if pingsQuick(a, c.IP) {
		t.Error("c's ingress is closed, yet a reached it after the restart")
	}
}
