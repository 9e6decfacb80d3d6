package server

import (
	"context"
	"strings"
	"time"

	middleware "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcMetrics are the server metrics of go-grpc-middleware's prometheus
// provider under the dpd namespace, with its names, help, labels and
// meaning (dpd_grpc_server_started_total, _handled_total,
// _msg_received_total, _msg_sent_total, _handling_seconds), computed more
// cheaply: a stream looks its message series up once, so each message
// costs one atomic add instead of a label hash, a map lookup and two clock
// reads per interceptor. The Sync stream carries every controller message,
// and the middleware's per-message reporting was a measurable share of
// ingest.
type grpcMetrics struct {
	started  *prometheus.CounterVec
	handled  *prometheus.CounterVec
	received *prometheus.CounterVec
	sent     *prometheus.CounterVec
	handling *prometheus.HistogramVec
}

// Label values of grpc_type, as the middleware writes them.
const (
	grpcUnary        = "unary"
	grpcClientStream = "client_stream"
	grpcServerStream = "server_stream"
	grpcBidiStream   = "bidi_stream"
)

func newGRPCMetrics(buckets []float64) *grpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	return &grpcMetrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dpd", Name: "grpc_server_started_total",
			Help: "Total number of RPCs started on the server.",
		}, labels),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dpd", Name: "grpc_server_handled_total",
			Help: "Total number of RPCs completed on the server, regardless of success or failure.",
		}, append(labels[:3:3], "grpc_code")),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dpd", Name: "grpc_server_msg_received_total",
			Help: "Total number of RPC stream messages received on the server.",
		}, labels),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dpd", Name: "grpc_server_msg_sent_total",
			Help: "Total number of gRPC stream messages sent by the server.",
		}, labels),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "dpd", Name: "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: buckets,
		}, labels),
	}
}

// Describe and Collect make grpcMetrics one prometheus.Collector.
func (m *grpcMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

func (m *grpcMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

func (m *grpcMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.handling}
}

// InitializeMetrics creates every method's series at zero, every code of
// grpc_server_handled_total included, so that they exist before the first
// call.
func (m *grpcMetrics) InitializeMetrics(s *grpc.Server) {
	for service, info := range s.GetServiceInfo() {
		for _, mi := range info.Methods {
			typ := methodType(mi.IsClientStream, mi.IsServerStream)
			m.started.WithLabelValues(typ, service, mi.Name)
			m.received.WithLabelValues(typ, service, mi.Name)
			m.sent.WithLabelValues(typ, service, mi.Name)
			m.handling.WithLabelValues(typ, service, mi.Name)
			for _, c := range middleware.AllCodes { // the middleware's list
				m.handled.WithLabelValues(typ, service, mi.Name, c.String())
			}
		}
	}
}

func methodType(clientStream, serverStream bool) string {
	switch {
	case !clientStream && !serverStream:
		return grpcUnary
	case clientStream && !serverStream:
		return grpcClientStream
	case !clientStream && serverStream:
		return grpcServerStream
	}
	return grpcBidiStream
}

// splitMethod splits "/service/method" as the middleware does.
func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.Index(full, "/"); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", "unknown"
}

// codeOf is the status code err ends a call with, context errors mapped
// as gRPC maps them.
func codeOf(err error) codes.Code {
	s, ok := status.FromError(err)
	if !ok {
		s = status.FromContextError(err)
	}
	return s.Code()
}

// done counts a finished call.
func (m *grpcMetrics) done(typ, service, method string, start time.Time, err error) {
	m.handled.WithLabelValues(typ, service, method, codeOf(err).String()).Inc()
	m.handling.WithLabelValues(typ, service, method).Observe(time.Since(start).Seconds())
}

// UnaryServerInterceptor counts a unary call as the middleware does: its
// request as a message received, its response (when it succeeded) as one
// sent.
func (m *grpcMetrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		service, method := splitMethod(info.FullMethod)
		m.started.WithLabelValues(grpcUnary, service, method).Inc()
		m.received.WithLabelValues(grpcUnary, service, method).Inc()
		resp, err := handler(ctx, req)
		if err == nil {
			m.sent.WithLabelValues(grpcUnary, service, method).Inc()
		}
		m.done(grpcUnary, service, method, start, err)
		return resp, err
	}
}

// StreamServerInterceptor counts a stream and each message it received or
// sent successfully.
func (m *grpcMetrics) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		typ := methodType(info.IsClientStream, info.IsServerStream)
		service, method := splitMethod(info.FullMethod)
		m.started.WithLabelValues(typ, service, method).Inc()
		err := handler(srv, &countedStream{
			ServerStream: ss,
			received:     m.received.WithLabelValues(typ, service, method),
			sent:         m.sent.WithLabelValues(typ, service, method),
		})
		m.done(typ, service, method, start, err)
		return err
	}
}

// countedStream counts a stream's messages into series resolved once.
type countedStream struct {
	grpc.ServerStream
	received, sent prometheus.Counter
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.received.Inc()
	}
	return err
}

func (s *countedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		s.sent.Inc()
	}
	return err
}
