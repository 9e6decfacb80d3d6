package server_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/servertest"
)

// TestSessionReplaysAfterRestart: dpd restarts on the same socket with an
// empty engine; the client session reconnects on its own and replays the
// current desired state (the snapshot plus what was Sent since), then
// InSync, so the new dpd converges to the same endpoints.
func TestSessionReplaysAfterRestart(t *testing.T) {
	first := servertest.Start(t, "")
	c := dial(t, first.Socket)
	snap := basicScenario(t)
	sess := client.NewSession(c, func() []*felix.ToDataplane { return snap },
		client.WithBackoff(10*time.Millisecond, 200*time.Millisecond), client.WithLogger(servertest.Logger()))
	t.Cleanup(func() { sess.Close() })

	var log statusLog
	expect(t, sess.Statuses(), &log, basicUp, 1)
	const epD = "k8s/demo/demo-d/eth0"
	if err := sess.Send(wepUpdate("demo/demo-d", "cali-demo-d", "10.65.0.4/32")); err != nil {
		t.Fatal(err)
	}
	// demo-c leaves: the replay must not bring it back.
	if err := sess.Send(&felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{
		Id: &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "demo/demo-c", EndpointId: "eth0"},
	}}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{epA: "up", epB: "up", epD: "up"}
	expect(t, sess.Statuses(), &log, want, 1)

	first.Stop(t)
	second := servertest.Start(t, first.Socket)
	log = statusLog{}
	expect(t, sess.Statuses(), &log, want, 1)
	inspect := dial(t, second.Socket).Inspect()
	eventually(t, "the restarted dpd has the replayed endpoints", func() error {
		resp, err := inspect.ListEndpoints(context.Background(), &dpdv1.ListEndpointsRequest{})
		if err != nil {
			return err
		}
		var ids []string
		for _, ep := range resp.GetEndpoints() {
			ids = append(ids, ep.GetId().GetWorkloadId())
		}
		if want := []string{"demo/demo-a", "demo/demo-b", "demo/demo-d"}; !slices.Equal(ids, want) {
			return fmt.Errorf("after the replay dpd has %v, want %v", ids, want)
		}
		return nil
	})
	if err := sess.Err(); err != nil {
		t.Errorf("session ended: %v", err)
	}
}
