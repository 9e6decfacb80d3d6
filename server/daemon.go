package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/server/policysync"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Daemon is dpd: the engine over one kernel, its gRPC servers and the
// metrics/health HTTP endpoint, run as one group that stops as a whole.
type Daemon struct {
	cfg    Config
	reg    *prometheus.Registry
	engine *engine.Engine
	server *Server
	binder *policysync.Binder // nil without --policysync-dir
	pipe   *pipeController    // nil unless --felix-pipe

	flows         *flowAggregator // nil unless the kernel reports flow events
	engineRunning atomic.Bool
	listening     atomic.Bool
}

// NewDaemon builds a daemon over kernel. Metrics go to a registry of its
// own (with Go and process collectors), never the global default.
func NewDaemon(cfg Config, kernel engine.Kernel) (*Daemon, error) {
	cfg = cfg.withDefaults()
	cfg.Log = floodLimited(cfg.Log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	eng := engine.New(engine.Options{Kernel: kernel, Name: cfg.Dataplane, Log: cfg.Log, Registry: reg,
		MaxPendingStatuses: cfg.MaxPendingStatuses, InterfaceExclude: cfg.InterfaceExclude,
		StagedPreview: cfg.StagedPreview})
	// Controllers (gRPC or pipe) reach the engine through front, which also
	// feeds policy sync when it is on.
	var front Engine = eng
	var proc *policysync.Processor
	var psMet *policysync.Metrics
	if cfg.PolicySyncDir != "" {
		var err error
		if psMet, err = policysync.NewMetrics(reg); err != nil {
			return nil, fmt.Errorf("policy-sync metrics: %w", err)
		}
		proc = policysync.NewProcessor(policysync.Options{Log: cfg.Log.With("component", "policysync"), Metrics: psMet,
			Encoding: cfg.PolicySyncEncoding})
		front = tapEngine{Engine: eng, proc: proc}
	}
	srv, err := New(cfg, front, kernel, reg)
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, reg: reg, engine: eng, server: srv}
	if ki, ok := kernel.(engine.KernelInspector); ok {
		limit := 0
		if cfg.RuleMetrics {
			limit = cfg.RuleMetricsLimit
		}
		if err := reg.Register(newKernelCollector(ki, eng, limit)); err != nil {
			return nil, fmt.Errorf("register kernel metrics: %w", err)
		}
	}
	if fo, ok := kernel.(engine.FlowObserver); ok {
		if d.flows, err = newDaemonFlows(cfg, fo, eng); err != nil {
			return nil, err
		}
		if err := reg.Register(d.flows); err != nil {
			return nil, fmt.Errorf("register flow metrics: %w", err)
		}
	}
	if proc != nil {
		d.binder, err = policysync.NewBinder(policysync.BinderOptions{
			Dir: cfg.PolicySyncDir, Processor: proc, ServerOptions: srv.serverOptions(),
			MaxWorkloads: cfg.PolicySyncMaxWorkloads, Metrics: psMet, Log: cfg.Log.With("component", "policysync"),
		})
		if err != nil {
			return nil, err
		}
	}
	if cfg.FelixPipe {
		in, out := cfg.PipeIn, cfg.PipeOut
		if in == nil || out == nil {
			if in, out, err = openFelixPipe(); err != nil {
				return nil, err
			}
		}
		d.pipe = &pipeController{engine: front, in: in, out: out, maxFrame: 0, log: cfg.Log.With("component", "felix-pipe"), wireMet: srv.wireMet, extensions: cfg.FelixPipeExtensions}
	}
	return d, nil
}

// Registry is the daemon's private metrics registry.
func (d *Daemon) Registry() *prometheus.Registry { return d.reg }

// Ready reports whether the engine runs and the gRPC servers listen.
func (d *Daemon) Ready() bool { return d.engineRunning.Load() && d.listening.Load() }

// Handler serves /metrics, /livez and /readyz.
func (d *Daemon) Handler() http.Handler { return httpHandler(d.reg, d.Ready) }

// Run serves until ctx ends, SIGINT/SIGTERM arrives (both a clean stop:
// nil), or a part fails. Stopping drains the gRPC servers within the drain
// timeout.
func (d *Daemon) Run(ctx context.Context) error {
	log := d.cfg.Log
	unixLis, tcpLis, err := d.server.Listen()
	if err != nil {
		return err
	}
	var metricsLis net.Listener
	if d.cfg.MetricsAddr != "" {
		if metricsLis, err = net.Listen("tcp", d.cfg.MetricsAddr); err != nil {
			closeAll(unixLis, tcpLis)
			return fmt.Errorf("listen metrics: %w", err)
		}
	}

	// Interrupts run in the order added: drain the controller streams while
	// the engine still runs (so their sessions close cleanly), then stop it.
	var g run.Group
	g.Add(func() error {
		d.listening.Store(true)
		log.Info("dpd serving", "socket", d.cfg.Socket, "tcp", addrOf(tcpLis), "dataplane", d.cfg.Dataplane, "version", d.cfg.Version)
		return d.server.Serve(unixLis, tcpLis)
	}, func(error) {
		d.listening.Store(false)
		d.server.Drain()
	})
	{
		ectx, cancel := context.WithCancel(context.Background())
		g.Add(func() error {
			d.engineRunning.Store(true)
			d.server.SetServing(true)
			defer d.engineRunning.Store(false)
			err := d.engine.Run(ectx)
			if ectx.Err() != nil {
				return nil // asked to stop
			}
			if err == nil {
				err = errors.New("stopped on its own")
			}
			return fmt.Errorf("engine: %w", err)
		}, func(error) { cancel() })
	}
	if d.binder != nil {
		bctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error { return d.binder.Run(bctx) }, func(error) { cancel() })
	}
	if d.flows != nil {
		fctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error { return d.flows.run(fctx) }, func(error) { cancel() })
	}
	if d.pipe != nil {
		pctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error {
			// The end of the pipe (nil) stops the daemon like a signal.
			return d.pipe.run(pctx)
		}, func(error) { cancel(); d.pipe.close() })
	}
	if metricsLis != nil {
		hs := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second}
		g.Add(func() error {
			log.Info("metrics serving", "addr", metricsLis.Addr().String())
			if err := hs.Serve(metricsLis); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics serve: %w", err)
			}
			return nil
		}, func(error) {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			hs.Shutdown(sctx) //nolint:errcheck // best effort on the way out
		})
	}
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))

	err = g.Run()
	switch {
	case errors.Is(err, run.ErrSignal):
		log.Info("stopped", "reason", err)
		return nil
	case err == nil, ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil
	}
	return err
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

func closeAll(ls ...net.Listener) {
	for _, l := range ls {
		if l != nil {
			l.Close()
		}
	}
}
