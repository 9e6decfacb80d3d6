package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// scripted answers calls by a fixed script, so that two servers see
// exactly the same traffic: GetStatus fails every second call; Sync
// replies to every even sequence number and ends with InvalidArgument on
// sequence number 99, or cleanly at the client's end of stream.
type scripted struct {
	dpdv1.UnimplementedInspectServer
	dpdv1.UnimplementedDataplaneServer
	calls atomic.Int64
	// streamFields: the logging fields each Sync stream's context held.
	streamFields chan logging.Fields
}

func (s *scripted) GetStatus(context.Context, *dpdv1.GetStatusRequest) (*dpdv1.GetStatusResponse, error) {
	if s.calls.Add(1)%2 == 0 {
		return nil, status.Error(codes.NotFound, "every second call")
	}
	return &dpdv1.GetStatusResponse{Version: "test"}, nil
}

func (s *scripted) Sync(stream dpdv1.Dataplane_SyncServer) error {
	if s.streamFields != nil {
		s.streamFields <- logging.ExtractFields(stream.Context())
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if m.GetSequenceNumber() == 99 {
			return status.Error(codes.InvalidArgument, "sequence number 99")
		}
		if m.GetSequenceNumber()%2 == 0 {
			if err := stream.Send(&felix.FromDataplane{SequenceNumber: m.GetSequenceNumber()}); err != nil {
				return err
			}
		}
	}
}

// runScript serves srv with opts, initialize run on the server once its
// services are registered, and drives the script's calls through it.
func runScript(t *testing.T, srv *scripted, initialize func(*grpc.Server), opts ...grpc.ServerOption) {
	t.Helper()
	g := grpc.NewServer(opts...)
	dpdv1.RegisterInspectServer(g, srv)
	dpdv1.RegisterDataplaneServer(g, srv)
	initialize(g)
	lis := bufconn.Listen(1 << 20)
	go g.Serve(lis)
	defer g.Stop()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()

	inspect := dpdv1.NewInspectClient(conn)
	for range 5 {
		inspect.GetStatus(ctx, &dpdv1.GetStatusRequest{}) // every second one fails, as scripted
	}
	// A stream the client ends: 10 messages in, 5 replies out, OK.
	sync := func(seqs ...uint64) {
		st, err := dpdv1.NewDataplaneClient(conn).Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, seq := range seqs {
			if err := st.Send(&felix.ToDataplane{SequenceNumber: seq}); err != nil {
				break // the server ended the stream; Recv tells why
			}
		}
		st.CloseSend()
		for {
			if _, err := st.Recv(); err != nil {
				return // the stream is over on the server too
			}
		}
	}
	sync(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	// A stream the server ends with InvalidArgument after 3 messages and
	// one reply.
	sync(1, 2, 99)
}

// TestGRPCMetricsMatchMiddleware: dpd's gRPC server metrics expose what
// go-grpc-middleware's prometheus provider exposes for the same traffic:
// the same families (names, help, type), series (labels) and counts. Only
// the handling times differ, so histograms are compared by their buckets'
// bounds and sample counts.
func TestGRPCMetricsMatchMiddleware(t *testing.T) {
	buckets := []float64{0.001, 0.01, 0.1, 0.3, 1, 3, 10, 60, 600}

	refReg := prometheus.NewRegistry()
	ref := grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("dpd")),
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace("dpd"), grpcprom.WithHistogramBuckets(buckets)))
	refReg.MustRegister(ref)
	runScript(t, &scripted{}, func(g *grpc.Server) { ref.InitializeMetrics(g) },
		grpc.ChainUnaryInterceptor(ref.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(ref.StreamServerInterceptor()))

	ownReg := prometheus.NewRegistry()
	own := newGRPCMetrics(buckets)
	ownReg.MustRegister(own)
	runScript(t, &scripted{}, own.InitializeMetrics,
		grpc.ChainUnaryInterceptor(own.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(own.StreamServerInterceptor()))

	want, got := exposition(t, refReg), exposition(t, ownReg)
	if len(want) == 0 {
		t.Fatal("the middleware exposed nothing")
	}
	// The script must have produced non-zero counts of every kind, or the
	// comparison proves little.
	for _, line := range []string{
		`dpd_grpc_server_msg_received_total{grpc_method="Sync",grpc_service="dpd.v1.Dataplane",grpc_type="bidi_stream"} 13`,
		`dpd_grpc_server_msg_sent_total{grpc_method="Sync",grpc_service="dpd.v1.Dataplane",grpc_type="bidi_stream"} 6`,
		`dpd_grpc_server_handled_total{grpc_code="InvalidArgument",grpc_method="Sync",grpc_service="dpd.v1.Dataplane",grpc_type="bidi_stream"} 1`,
		`dpd_grpc_server_handled_total{grpc_code="NotFound",grpc_method="GetStatus",grpc_service="dpd.v1.Inspect",grpc_type="unary"} 2`,
	} {
		if !contains(want, line) {
			t.Errorf("the middleware's exposition lacks %s", line)
		}
	}
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("line %d:\n got %s\nwant %s", i, g, w)
		}
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

// exposition renders reg's families as sorted lines, one per family
// header and one per series: counters with their value, histograms with
// their bucket bounds and sample count.
func exposition(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		lines = append(lines, fmt.Sprintf("# %s %s %s", mf.GetName(), mf.GetType(), mf.GetHelp()))
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			name := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch mf.GetType().String() {
			case "COUNTER":
				lines = append(lines, fmt.Sprintf("%s %v", name, m.GetCounter().GetValue()))
			case "HISTOGRAM":
				var bounds []string
				for _, b := range m.GetHistogram().GetBucket() {
					bounds = append(bounds, fmt.Sprint(b.GetUpperBound()))
				}
				lines = append(lines, fmt.Sprintf("%s buckets=%s count=%d", name, strings.Join(bounds, ","), m.GetHistogram().GetSampleCount()))
			default:
				lines = append(lines, fmt.Sprintf("%s unexpected type", name))
			}
		}
	}
	sort.Strings(lines)
	return lines
}
