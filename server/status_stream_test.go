package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/proto/felix"
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
