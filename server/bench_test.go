package server_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client"
	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/servertest"
	"google.golang.org/grpc"
)

// The two benchmarks send the same stream of WorkloadEndpointUpdates and
// IPSetDeltaUpdates through client.Session over a Unix socket: one into the
// real server and engine (memory kernel), one into a gRPC server that
// discards. Their ratio is what dpd's server and engine cost on top of
// gRPC itself:
//
//	go test -run '^$' -bench SyncIngest ./server/

const benchSet = "s:bench"

func benchSnapshot() []*felix.ToDataplane {
	return []*felix.ToDataplane{
		{Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: benchSet, Members: []string{"10.200.0.1"}}}},
		{Payload: &felix.ToDataplane_ActiveProfileUpdate{ActiveProfileUpdate: &felix.ActiveProfileUpdate{
			Id:      &felix.ProfileID{Name: "kns.bench"},
			Profile: &felix.Profile{InboundRules: []*felix.Rule{{Action: "Allow", SrcIpSetIds: []string{benchSet}}}, OutboundRules: []*felix.Rule{{Action: "Allow"}}},
		}}},
	}
}

// benchMessages alternates updates of 1000 endpoints with deltas of the
// set, all distinct.
func benchMessages() []*felix.ToDataplane {
	const n = 2000
	msgs := make([]*felix.ToDataplane, 0, n)
	for i := range n / 2 {
		w := wepUpdate(fmt.Sprintf("bench/w%d", i), fmt.Sprintf("cali-b%d", i), fmt.Sprintf("10.100.%d.%d/32", i/256, i%256))
		msgs = append(msgs, w, &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{
			Id: benchSet, AddedMembers: []string{fmt.Sprintf("10.101.%d.%d", i/256, i%256)},
		}}})
	}
	return msgs
}

// ingest sends b.N messages on sess and waits until received() reaches
// base + b.N; it reports messages per second.
func ingest(b *testing.B, sess *client.Session, received func() uint64) {
	msgs := benchMessages()
	base := received()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if err := sess.Send(msgs[i%len(msgs)]); err != nil {
			b.Fatal(err)
		}
	}
	testutil.WaitFor(b, time.Minute, "messages ingested", func() bool { return received() >= base+uint64(b.N) })
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

func BenchmarkSyncIngest(b *testing.B) {
	d := servertest.Start(b, "")
	c := dial(b, d.Socket)
	sess := client.NewSession(c, benchSnapshot, client.WithLogger(servertest.Logger()))
	b.Cleanup(func() { sess.Close() })
	// Drain statuses so the stream never stalls on them, and wait for the
	// snapshot to be in.
	inSync := make(chan struct{})
	go func() {
		seen := false
		for m := range sess.Statuses() {
			if !seen && m.GetDataplaneInSync() != nil {
				seen = true
				close(inSync)
			}
		}
	}()
	<-inSync
	inspect := c.Inspect()
	ingest(b, sess, func() uint64 {
		st, err := inspect.GetStatus(context.Background(), &dpdv1.GetStatusRequest{})
		if err != nil {
			b.Fatal(err)
		}
		return st.GetSession().GetMessagesReceived()
	})
}

// discard is a Dataplane server without an engine.
type discard struct {
	dpdv1.UnimplementedDataplaneServer
	received atomic.Uint64
}

func (s *discard) Sync(stream dpdv1.Dataplane_SyncServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
		s.received.Add(1)
	}
}

func BenchmarkSyncIngestRaw(b *testing.B) {
	socket := servertest.SocketPath(b)
	lis, err := net.Listen("unix", socket)
	if err != nil {
		b.Fatal(err)
	}
	srv := &discard{}
	g := grpc.NewServer()
	dpdv1.RegisterDataplaneServer(g, srv)
	go g.Serve(lis)
	b.Cleanup(g.Stop)
	c := dial(b, socket)
	sess := client.NewSession(c, benchSnapshot, client.WithLogger(servertest.Logger()))
	b.Cleanup(func() { sess.Close() })
	testutil.WaitFor(b, 10*time.Second, "snapshot received", func() bool { return srv.received.Load() >= uint64(len(benchSnapshot())+1) })
	ingest(b, sess, srv.received.Load)
}
