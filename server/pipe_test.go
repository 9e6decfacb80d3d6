package server_test

import (
	"context"
	"encoding/binary"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server"
	"github.com/dpd-dev/dpd/server/felixpipe"
	"github.com/dpd-dev/dpd/server/servertest"
)

// TestPipeModeInProcess: in pipe mode a frame that does not decode and a
// message that fails validation are both counted as invalid (the pipe
// stays up), a gRPC controller is refused, and the end of the input stops
// the daemon cleanly.
func TestPipeModeInProcess(t *testing.T) {
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inW.Close(); outR.Close() })
	go func() { // statuses
		r := felixpipe.NewReader(outR, 0)
		for r.Read(&felix.FromDataplane{}) == nil {
		}
	}()
	d := servertest.StartConfig(t, server.Config{FelixPipe: true, PipeIn: inR, PipeOut: outW})

	garbage := binary.LittleEndian.AppendUint64(nil, 3)
	if _, err := inW.Write(append(garbage, 0xff, 0xff, 0xff)); err != nil {
		t.Fatal(err)
	}
	w := felixpipe.NewWriter(inW)
	bad := &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{}}}
	if err := w.Write(bad); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "two invalid messages counted", func() bool {
		return d.Metric(t, "dpd_invalid_messages_total") == 2
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := dial(t, d.Socket).Dataplane().Sync(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("gRPC controller in pipe mode: %v, want FailedPrecondition", err)
	}

	inW.Close()
	testutil.WaitFor(t, 10*time.Second, "the daemon to stop at the end of the pipe", func() bool { return !d.Ready() })
	d.Stop(t) // fails t unless Run returned nil
}
