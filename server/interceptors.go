package server

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// interceptors is the chain every gRPC server of the daemon uses, modelled
// on go-grpc-middleware's examples/server: metrics outermost so they see the
// final code, then logging, then recovery innermost so a panic becomes
// codes.Internal before the others report it. The metrics are the
// middleware's prometheus provider's, counted more cheaply (grpcmetrics.go).
type interceptors struct {
	metrics *grpcMetrics
	panics  prometheus.Counter
	log     *slog.Logger
}

func newInterceptors(log *slog.Logger, reg prometheus.Registerer) (*interceptors, error) {
	i := &interceptors{
		// The dpd_ namespace keeps every metric of the daemon under one
		// prefix: dpd_grpc_server_handled_total and friends.
		metrics: newGRPCMetrics([]float64{0.001, 0.01, 0.1, 0.3, 1, 3, 10, 60, 600}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dpd_grpc_panics_total",
			Help: "Panics in gRPC handlers, recovered as codes.Internal.",
		}),
		log: log,
	}
	for _, c := range []prometheus.Collector{i.metrics, i.panics} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register grpc metrics: %w", err)
		}
	}
	return i, nil
}

// serverOptions returns the chained unary and stream interceptors.
func (i *interceptors) serverOptions() []grpc.ServerOption {
	logger := slogAdapter(i.log)
	// One line per finished call: code and duration say enough; the Sync
	// service logs its own session start. Successful calls (health probes,
	// dpdctl) only at debug, so they do not drown the log. Nothing is
	// logged per message, which callLevel relies on.
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(func(c codes.Code) logging.Level {
			if c == codes.OK {
				return logging.LevelDebug
			}
			return logging.DefaultServerCodeToLevel(c)
		}),
	}
	rec := recovery.WithRecoveryHandlerContext(i.recovered)
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(
			i.metrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(logger, logOpts...),
			recovery.UnaryServerInterceptor(rec),
		),
		grpc.ChainStreamInterceptor(
			i.metrics.StreamServerInterceptor(),
			callLevel(logging.StreamServerInterceptor(logger, logOpts...)),
			recovery.StreamServerInterceptor(rec),
		),
	}
}

// callLevel runs a stream interceptor around the call but hands the
// handler the stream it was given, not the interceptor's wrapper (only
// its context, which carries the interceptor's fields): the logging
// interceptor logs only when a call finishes (logOpts), so its
// per-message hooks log nothing, yet each costs two clock reads on every
// message of the Sync stream.
func callLevel(icpt grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return icpt(srv, ss, info, func(srv any, wrapped grpc.ServerStream) error {
			return handler(srv, &contextStream{ServerStream: ss, ctx: wrapped.Context()})
		})
	}
}

// contextStream is a stream with another context.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// recovered turns a handler panic into codes.Internal. The panic value and
// stack go to the log, not to the client.
func (i *interceptors) recovered(ctx context.Context, p any) error {
	i.panics.Inc()
	i.log.ErrorContext(ctx, "recovered from panic in gRPC handler", "panic", p, "stack", string(debug.Stack()))
	return status.Error(codes.Internal, "internal error")
}

// slogAdapter is the logging interceptor's Logger over slog; the middleware's
// levels are slog levels.
func slogAdapter(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}
