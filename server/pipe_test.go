package server_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server"
	"github.com/dpd-dev/dpd/server/felixpipe"
	"github.com/dpd-dev/dpd/server/servertest"
)

// TestPipeModeInProcess: in pipe mode a message that fails validation and
// a frame that does not decode but names its endpoint are both counted as
// invalid (the pipe stays up), a gRPC controller is refused, and the end
// of the input stops the daemon cleanly.
func TestPipeModeInProcess(t *testing.T) {
	inW, d := startPipe(t)
	w := felixpipe.NewWriter(inW)
	bad := &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{}}}
	if err := w.Write(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := inW.Write(pipeFrame(undecodableWorkload())); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "two invalid messages counted", func() bool {
		return d.Metric(t, "dpd_invalid_messages_total") == 2
	})
	if n := d.MetricWhere(t, "dpd_felix_decode_errors_total", map[string]string{"transport": "pipe", "outcome": "endpoint"}); n != 1 {
		t.Fatalf("decode errors against an endpoint: %v, want 1", n)
	}

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

// A frame that does not decode and names no endpoint ends the pipe with an
// error (dpd exits; Felix follows and is restarted with a full resend).
func TestPipeUndecodableExits(t *testing.T) {
	inW, d := startPipe(t)
	if _, err := inW.Write(pipeFrame([]byte{0xff, 0xff, 0xff})); err != nil {
		t.Fatal(err)
	}
	err := d.WaitExit(t)
	if err == nil || !strings.Contains(err.Error(), "undecodable") {
		t.Fatalf("daemon exit: %v, want an undecodable-message error", err)
	}
	if n := d.MetricWhere(t, "dpd_felix_decode_errors_total", map[string]string{"transport": "pipe", "outcome": "resync"}); n != 1 {
		t.Fatalf("resync decode errors: %v, want 1", n)
	}
}

// startPipe runs a pipe-mode daemon; statuses on its fd 4 are drained.
func startPipe(t *testing.T) (*os.File, *servertest.Daemon) {
	t.Helper()
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
	return inW, servertest.StartConfig(t, server.Config{FelixPipe: true, PipeIn: inR, PipeOut: outW})
}

func pipeFrame(b []byte) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(b))), b...)
}

// undecodableWorkload is a WorkloadEndpointUpdate (11) whose id (1) reads
// but whose tier (endpoint 5, tiers 7) is cut short.
func undecodableWorkload() []byte {
	app := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	var id []byte
	id = app(id, 2, []byte("k8s"))
	id = app(id, 3, []byte("default/pod-x"))
	id = app(id, 4, []byte("eth0"))
	ep := app(app(nil, 2, []byte("calix")), 7, []byte{0x12, 0x7f})
	return app(nil, 11, app(app(nil, 1, id), 5, ep))
}

// TestPipeSendsFelixOnlyWhatItReads: by default fd 4 carries no
// DataplaneInSync and no dpd extension (Felix logs both as unknown), and
// workload statuses carry their endpoint without tiers; with
// FelixPipeExtensions both are sent.
func TestPipeSendsFelixOnlyWhatItReads(t *testing.T) {
	for _, ext := range []bool{false, true} {
		t.Run(fmt.Sprintf("extensions=%v", ext), func(t *testing.T) {
			inR, inW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			outR, outW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { inW.Close(); outR.Close() })
			var mu sync.Mutex
			var got []*felix.FromDataplane
			go func() {
				r := felixpipe.NewReader(outR, 0)
				for {
					m := &felix.FromDataplane{}
					if r.Read(m) != nil {
						return
					}
					mu.Lock()
					got = append(got, m)
					mu.Unlock()
				}
			}()
			servertest.StartConfig(t, server.Config{FelixPipe: true, FelixPipeExtensions: ext, PipeIn: inR, PipeOut: outW})
			up := func(wl string) func() bool {
				return func() bool {
					mu.Lock()
					defer mu.Unlock()
					for _, m := range got {
						if u := m.GetWorkloadEndpointStatusUpdate(); u.GetId().GetWorkloadId() == wl && u.GetStatus().GetStatus() == "up" {
							return true
						}
					}
					return false
				}
			}
			w := felixpipe.NewWriter(inW)
			wep := func(wl, ip string) *felix.ToDataplane {
				return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
					Id: &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: wl, EndpointId: "eth0"},
					Endpoint: &felix.WorkloadEndpoint{State: "active", Name: "cali-" + wl[len(wl)-1:], Ipv4Nets: []string{ip},
						Tiers: []*felix.TierInfo{{Name: "default", IngressPolicies: []*felix.PolicyID{{Name: "allow", Kind: "GlobalNetworkPolicy"}}}}},
				}}}
			}
			for _, m := range []*felix.ToDataplane{
				{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
					Id: &felix.PolicyID{Name: "allow", Kind: "GlobalNetworkPolicy"}, Policy: &felix.Policy{InboundRules: []*felix.Rule{{Action: "allow"}}}}}},
				wep("demo/a", "10.65.0.1/32"),
				{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}},
			} {
				if err := w.Write(m); err != nil {
					t.Fatal(err)
				}
			}
			testutil.WaitFor(t, 10*time.Second, "a up", up("demo/a"))
			// Statuses are sent in order: once b's "up" arrives, whatever the
			// in-sync snapshot produced (DataplaneInSync, the happy report)
			// has been sent or dropped.
			if err := w.Write(wep("demo/b", "10.65.0.2/32")); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, 10*time.Second, "b up", up("demo/b"))
			mu.Lock()
			defer mu.Unlock()
			var inSync, happy int
			for _, m := range got {
				switch {
				case m.GetDataplaneInSync() != nil:
					inSync++
				case m.GetHappyEndpoints() != nil:
					happy++
				case len(m.GetWorkloadEndpointStatusUpdate().GetEndpoint().GetTiers()) > 0:
					t.Errorf("a workload status carries its tiers to Felix: %v", m)
				}
			}
			if ext != (inSync > 0) || ext != (happy > 0) {
				t.Fatalf("extensions %v: %d DataplaneInSync, %d happy reports on fd 4", ext, inSync, happy)
			}
		})
	}
}

// TestPipeLegacyGeneration: on the pipe, as on gRPC, a Felix v3.28-v3.31
// encoding (policy names in tiers, PolicyID{tier,name}, a staged: prefix)
// is recognised per message: the endpoint is applied with the enforced
// policy only, and the messages are counted as the older generation.
func TestPipeLegacyGeneration(t *testing.T) {
	inW, d := startPipe(t)
	for _, m := range legacySnapshot() {
		if _, err := inW.Write(pipeFrame(m)); err != nil {
			t.Fatal(err)
		}
	}
	waitLegacyApplied(t, d)
	if n := d.MetricWhere(t, "dpd_felix_wire_messages_total", map[string]string{"transport": "pipe", "generation": "legacy"}); n != 3 {
		t.Fatalf("legacy messages counted on the pipe: %v, want 3", n)
	}
	if n := d.Metric(t, "dpd_invalid_messages_total"); n != 0 {
		t.Fatalf("%v invalid messages, want none", n)
	}
}
