package servertest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/server"
)

// Daemon is a running test daemon.
type Daemon struct {
	*server.Daemon
	Socket string
	Kernel *memkernel.Kernel

	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

// Start runs a daemon with the memory dataplane on socket ("" picks a fresh
// one), waits until it is ready, and stops it when t ends.
func Start(t testing.TB, socket string) *Daemon {
	t.Helper()
	return StartConfig(t, server.Config{Socket: socket})
}

// StartConfig is Start with more of the config (TCP, TLS); Socket ""
// picks a fresh one, and the dataplane is always memory.
func StartConfig(t testing.TB, cfg server.Config) *Daemon {
	t.Helper()
	k := memkernel.New()
	cfg.Dataplane = "memory"
	d := StartKernel(t, cfg, k)
	d.Kernel = k
	return d
}

// StartKernel is StartConfig over any kernel (the linux one in privileged
// tests); cfg.Dataplane names it. Kernel stays nil in the result.
func StartKernel(t testing.TB, cfg server.Config, k engine.Kernel) *Daemon {
	t.Helper()
	if cfg.Socket == "" {
		cfg.Socket = SocketPath(t)
	}
	cfg.Version, cfg.Log = "test", Logger()
	sd, err := server.NewDaemon(cfg, k)
	if err != nil {
		t.Fatalf("new daemon: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Daemon{Daemon: sd, Socket: cfg.Socket, cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- sd.Run(ctx) }()
	t.Cleanup(func() { d.Stop(t) })
	testutil.WaitFor(t, 10*time.Second, "daemon ready", func() bool {
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("daemon exited early: %v", err)
		default:
		}
		return sd.Ready()
	})
	return d
}

// Stop stops the daemon and fails t if it does not stop cleanly. Calling it
// again does nothing.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	d.stopOnce.Do(func() {
		d.cancel()
		select {
		case err := <-d.done:
			if err != nil {
				t.Errorf("daemon stopped with error: %v", err)
			}
		case <-time.After(15 * time.Second): // hang guard, not a timing assertion
			t.Errorf("daemon did not stop")
		}
	})
}

// WaitExit waits for the daemon to stop on its own and returns what Run
// returned; Stop does nothing afterwards.
func (d *Daemon) WaitExit(t testing.TB) error {
	t.Helper()
	var err error
	testutil.WaitFor(t, 10*time.Second, "the daemon to exit", func() bool {
		select {
		case err = <-d.done:
			return true
		default:
			return false
		}
	})
	d.stopOnce.Do(d.cancel)
	return err
}

// Metric returns the value of the counter or gauge name (summed over its
// label sets) from the daemon's registry.
func (d *Daemon) Metric(t testing.TB, name string) float64 {
	t.Helper()
	return d.MetricWhere(t, name, nil)
}

// MetricWhere is Metric summed over only the label sets that include
// every label in match.
func (d *Daemon) MetricWhere(t testing.TB, name string, match map[string]string) float64 {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, want := range match {
				if have[k] != want {
					continue metrics
				}
			}
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}

// SocketPath is a fresh socket path short enough for sun_path (108 bytes),
// which t.TempDir() under long test names is not.
func SocketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dpd")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "dpd.sock")
}

// Logger logs to stderr under go test -v and nowhere otherwise.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
