package server

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixwire"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Engine is what the services need of *engine.Engine.
type Engine interface {
	NewSession(peer string) engine.Session
	Status() engine.StatusInfo
	Endpoints() []engine.EndpointInfo
	Endpoint(id string) (engine.EndpointInfo, bool)
	Policies(ctx context.Context) ([]engine.PolicyInfo, error)
	IPSets(ctx context.Context, q engine.IPSetQuery) ([]engine.IPSetInfo, error)
	Services(ctx context.Context) ([]model.Service, error)
	Routes(ctx context.Context) ([]model.Route, error)
}

// Server holds dpd's gRPC servers: plaintext on the Unix socket (guarded by
// its file mode) and, with --listen-tcp, a second one whose credentials are
// mTLS. Both carry the same services, so the one-controller rule spans them.
type Server struct {
	cfg    Config
	icpt   *interceptors
	health *health.Server
	sync   *syncService
	unix   *grpc.Server
	tcp    *grpc.Server // nil without ListenTCP
	// wireMet counts the wire edge's decoding, for the pipe too.
	wireMet *felixwire.Metrics
}

// healthServices are reported SERVING once the engine runs ("" is the
// whole server, as grpc-health-probe asks by default).
var healthServices = []string{"", dpdv1.Dataplane_ServiceDesc.ServiceName, dpdv1.Inspect_ServiceDesc.ServiceName}

// New builds the servers over eng and registers the gRPC metrics in reg.
// kernel is the dataplane under eng: Inspect adds what it says when it is
// an engine.EndpointInspector, and answers counters and trace when it is
// an engine.KernelInspector.
func New(cfg Config, eng Engine, kernel any, reg prometheus.Registerer) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	icpt, err := newInterceptors(cfg.Log, reg)
	if err != nil {
		return nil, err
	}
	wireMet, err := felixwire.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	syncSvc := newSyncService(eng, cfg.Log)
	syncSvc.pipeMode = cfg.FelixPipe
	syncSvc.wireMet = wireMet
	s := &Server{cfg: cfg, icpt: icpt, health: health.NewServer(), sync: syncSvc, wireMet: wireMet}
	s.SetServing(false)
	inspect := newInspectService(eng, kernel, cfg.Version, cfg.Dataplane)

	common := s.serverOptions()
	build := func(creds grpc.ServerOption) *grpc.Server {
		g := grpc.NewServer(append(common, creds)...)
		dpdv1.RegisterDataplaneServer(g, syncSvc)
		dpdv1.RegisterInspectServer(g, inspect)
		felix.RegisterPolicySyncServer(g, &policySyncService{dir: cfg.PolicySyncDir})
		healthpb.RegisterHealthServer(g, s.health)
		reflection.Register(g)
		icpt.metrics.InitializeMetrics(g)
		return g
	}
	s.unix = build(grpc.Creds(insecure.NewCredentials()))
	if cfg.ListenTCP != "" {
		creds := insecure.NewCredentials()
		if !cfg.InsecureTCP {
			if creds, err = serverTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA); err != nil {
				return nil, err
			}
		}
		s.tcp = build(grpc.Creds(creds))
	}
	return s, nil
}

// serverOptions are what every gRPC server of the daemon shares, the
// per-workload policy-sync servers included: interceptors, message size,
// keepalive.
func (s *Server) serverOptions() []grpc.ServerOption {
	return append(s.icpt.serverOptions(),
		rawCodecOption(),
		grpc.MaxRecvMsgSize(s.cfg.MaxRecvMsgSize),
		// Find half-dead clients; the takeover policy makes them harmless,
		// keepalive frees their resources.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
}

// SetServing flips the health status of every service.
func (s *Server) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range healthServices {
		s.health.SetServingStatus(name, st)
	}
}

// Listen opens the configured listeners: the Unix socket (if set) and the
// TCP address (if set). Either may come back nil.
func (s *Server) Listen() (unixLis, tcpLis net.Listener, err error) {
	if s.cfg.Socket != "" {
		if unixLis, err = ListenUnix(s.cfg.Socket); err != nil {
			return nil, nil, err
		}
	}
	if s.cfg.ListenTCP != "" {
		if tcpLis, err = net.Listen("tcp", s.cfg.ListenTCP); err != nil {
			if unixLis != nil {
				unixLis.Close()
			}
			return nil, nil, fmt.Errorf("listen tcp: %w", err)
		}
	}
	return unixLis, tcpLis, nil
}

// Serve serves on the given listeners (nil ones are skipped) until Drain
// or a listener fails.
func (s *Server) Serve(unixLis, tcpLis net.Listener) error {
	errc := make(chan error, 2)
	n := 0
	for _, p := range []struct {
		g   *grpc.Server
		lis net.Listener
	}{{s.unix, unixLis}, {s.tcp, tcpLis}} {
		if p.g == nil || p.lis == nil {
			continue
		}
		n++
		go func() { errc <- p.g.Serve(p.lis) }()
	}
	if n == 0 {
		return fmt.Errorf("no listener")
	}
	for range n {
		if err := <-errc; err != nil {
			return fmt.Errorf("grpc serve: %w", err)
		}
	}
	return nil
}

// Drain ends the controller stream (codes.Unavailable), marks health
// NOT_SERVING and stops the servers gracefully, forcibly after the drain
// timeout.
func (s *Server) Drain() {
	s.health.Shutdown()
	s.sync.drain()
	var wg sync.WaitGroup
	for _, g := range []*grpc.Server{s.unix, s.tcp} {
		if g == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			go func() { g.GracefulStop(); close(done) }()
			t := time.NewTimer(s.cfg.DrainTimeout)
			defer t.Stop()
			select {
			case <-done:
			case <-t.C:
				s.cfg.Log.Warn("graceful stop timed out; closing connections", "timeout", s.cfg.DrainTimeout)
				g.Stop()
			}
		}()
	}
	wg.Wait()
}
