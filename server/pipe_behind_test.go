package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixpipe"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestPipeFelixBehindStops: a Felix that writes but never reads fd 4,
// while its pods come and go, makes the pipe session end once the unread
// statuses pass the cap: run returns an error naming it (dpd exits, Felix
// restarts it and resyncs), as when a write to Felix fails.
func TestPipeFelixBehindStops(t *testing.T) {
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inR.Close(); inW.Close(); outR.Close(); outW.Close() })

	eng := engine.New(engine.Options{Kernel: memkernel.New(), Log: quietLog(), MaxPendingStatuses: 50})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(ctx) }()
	defer func() { cancel(); <-engDone }()

	p := &pipeController{engine: eng, in: inR, out: outW, log: quietLog()}
	done := make(chan error, 1)
	go func() { done <- p.run(ctx) }()

	w := felixpipe.NewWriter(inW)
	write := func(m *felix.ToDataplane) bool { return w.Write(m) == nil }
	write(&felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}})
	writer := make(chan struct{})
	go func() { // stops when run closes fd 3's reader side or the test ends
		defer close(writer)
		for i := 0; ; i++ {
			wl := fmt.Sprintf("w%d", i)
			id := &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: wl, EndpointId: "eth0"}
			if !write(&felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
				Id: id, Endpoint: &felix.WorkloadEndpoint{State: "active", Name: "cali" + wl, Ipv4Nets: []string{"10.65.0.1/32"}}}}}) ||
				!write(&felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{Id: id}}}) {
				return
			}
			select {
			case <-ctx.Done():
				return
			default:
			}
		}
	}()
	select {
	case err := <-done:
		if !errors.Is(err, engine.ErrControllerBehind) {
			t.Fatalf("pipe run ended with %v, want ErrControllerBehind", err)
		}
	case <-time.After(30 * time.Second): // hang guard, not a timing assertion
		t.Fatal("the pipe session did not end while felix read nothing")
	}
	inR.Close() // unblocks the writer
	cancel()
	<-writer
}
