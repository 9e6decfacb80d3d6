package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// panicky panics in a unary and a streaming handler.
type panicky struct {
	dpdv1.UnimplementedInspectServer
	dpdv1.UnimplementedDataplaneServer
}

func (panicky) GetStatus(context.Context, *dpdv1.GetStatusRequest) (*dpdv1.GetStatusResponse, error) {
	panic("unary boom")
}

func (panicky) Sync(dpdv1.Dataplane_SyncServer) error { panic("stream boom") }

// TestRecoveryInterceptor: the daemon's chain turns a handler panic into
// codes.Internal (without leaking the panic value), counts it, and the
// metrics interceptor sees the final code.
func TestRecoveryInterceptor(t *testing.T) {
	reg := prometheus.NewRegistry()
	icpt, err := newInterceptors(slog.New(slog.NewTextHandler(io.Discard, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(icpt.serverOptions()...)
	dpdv1.RegisterInspectServer(g, panicky{})
	dpdv1.RegisterDataplaneServer(g, panicky{})
	lis := bufconn.Listen(1 << 20)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()

	_, err = dpdv1.NewInspectClient(conn).GetStatus(ctx, &dpdv1.GetStatusRequest{})
	if status.Code(err) != codes.Internal || status.Convert(err).Message() != "internal error" {
		t.Errorf("unary panic = %v, want Internal: internal error", err)
	}
	if got := sample(t, reg, "dpd_grpc_panics_total", "", ""); got != 1 {
		t.Errorf("dpd_grpc_panics_total = %v after a unary panic, want 1", got)
	}

	stream, err := dpdv1.NewDataplaneClient(conn).Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Internal {
		t.Errorf("stream panic = %v, want Internal", err)
	}
	if got := sample(t, reg, "dpd_grpc_panics_total", "", ""); got != 2 {
		t.Errorf("dpd_grpc_panics_total = %v after a stream panic, want 2", got)
	}

	if got := sample(t, reg, "dpd_grpc_server_handled_total", "grpc_code", "Internal"); got != 2 {
		t.Errorf("dpd_grpc_server_handled_total{grpc_code=Internal} = %v, want 2", got)
	}
}

// sample sums the counter name over the label sets where label=value
// (every set when label is "").
func sample(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == label && l.GetValue() == value)
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestStreamLoggingCallLevel: with the daemon's chain, where the logging
// interceptor only wraps the call (callLevel), a stream still logs its
// finished call with its code, its handler's context still carries the
// logging fields, and its messages are still counted.
func TestStreamLoggingCallLevel(t *testing.T) {
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	icpt, err := newInterceptors(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &scripted{streamFields: make(chan logging.Fields, 2)}
	runScript(t, srv, icpt.metrics.InitializeMetrics, icpt.serverOptions()...)

	for range 2 {
		f := <-srv.streamFields
		var method string
		for it := f.Iterator(); it.Next(); {
			if k, v := it.At(); k == "grpc.method" {
				method = fmt.Sprint(v)
			}
		}
		if method != "Sync" {
			t.Errorf("the Sync handler's context has logging fields %v, want grpc.method=Sync among them", f)
		}
	}
	var finished []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "finished call" && rec["grpc.method"] == "Sync" {
			finished = append(finished, rec)
		}
	}
	if len(finished) != 2 {
		t.Fatalf("%d finished-call lines for Sync, want 2:\n%s", len(finished), logs.String())
	}
	if finished[0]["grpc.code"] != "OK" || finished[0]["level"] != "DEBUG" {
		t.Errorf("the stream the client ended logged %v, want grpc.code OK at DEBUG", finished[0])
	}
	if finished[1]["grpc.code"] != "InvalidArgument" || finished[1]["level"] != "INFO" || finished[1]["grpc.error"] == nil {
		t.Errorf("the stream the server failed logged %v, want grpc.code InvalidArgument at INFO (the middleware's level for it) with grpc.error", finished[1])
	}
	if got := sample(t, reg, "dpd_grpc_server_msg_received_total", "grpc_method", "Sync"); got != 13 {
		t.Errorf("dpd_grpc_server_msg_received_total{grpc_method=Sync} = %v, want 13", got)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
