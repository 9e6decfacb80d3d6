package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/client"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server"
	"github.com/dpd-dev/dpd/server/servertest"
)

// TestSyncStatusWireContent: over a real stream, statuses are numbered
// 1..n and a workload status echoes the endpoint as sent.
func TestSyncStatusWireContent(t *testing.T) {
	d := servertest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // hang guard
	defer cancel()
	stream, err := dial(t, d.Socket).Dataplane().Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range append(basicScenario(t), &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}) {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	var log statusLog
	for seq := uint64(1); log.inSync == 0 || !log.has(basicUp); seq++ {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if m.GetSequenceNumber() != seq {
			t.Fatalf("sequence number %d, want %d", m.GetSequenceNumber(), seq)
		}
		if u := m.GetWorkloadEndpointStatusUpdate(); u != nil && u.GetEndpoint().GetName() == "" {
			t.Fatalf("status without the endpoint: %v", u)
		}
		log.add(m)
	}
}

// TestSyncControllerBehindResourceExhausted: a controller that sends but
// never reads, while its pods come and go, is ended with
// ResourceExhausted once its unread statuses pass the cap; it is counted,
// and a new stream resyncs.
func TestSyncControllerBehindResourceExhausted(t *testing.T) {
	d := servertest.StartConfig(t, server.Config{MaxPendingStatuses: 50})
	c := dial(t, d.Socket)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // hang guard
	defer cancel()
	stream, err := c.Dataplane().Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}); err != nil {
		t.Fatal(err)
	}
	// gRPC's flow control holds what the transport buffers; beyond it the
	// statuses wait in dpd.
	const maxChurn = 200000
	sent := 0
	for ; sent < maxChurn; sent++ {
		wl := fmt.Sprintf("w%d", sent)
		if err := stream.Send(wepUpdate(wl, "cali"+wl, "10.65.0.1/32")); err != nil {
			break
		}
		if err := stream.Send(wepRemoveMsg(wl)); err != nil {
			break
		}
	}
	if sent == maxChurn {
		t.Fatalf("stream still open after %d endpoints came and went unread", sent)
	}
	for {
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "fell behind") {
			t.Fatalf("stream ended with %v, want ResourceExhausted: fell behind", err)
		}
		break
	}
	t.Logf("ended after %d endpoints came and went", sent)
	if n := d.Metric(t, "dpd_controller_behind_total"); n != 1 {
		t.Fatalf("dpd_controller_behind_total = %v, want 1", n)
	}
	// Resync: a new stream gets the full report.
	next := client.NewSession(c, func() []*felix.ToDataplane { return basicScenario(t) }, client.WithLogger(servertest.Logger()))
	t.Cleanup(func() { next.Close() })
	var log statusLog
	expect(t, next.Statuses(), &log, basicUp, 1)
}

func wepRemoveMsg(workload string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{
		Id: &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: workload, EndpointId: "eth0"},
	}}}
}
