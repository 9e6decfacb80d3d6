package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"time"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv))
}

func run(args []string, getenv func(string) string) int {
	cfg, err := parseFlags(args, getenv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintln(os.Stderr, "dpd:", err)
		return 2
	}
	if code, done := cfg.Start.act(os.Stdout, os.Stderr); done {
		return code
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.Level}))
	cfg.Version = version
	if soft, hard, err := raiseFileLimit(); err != nil {
		cfg.Log.Warn("descriptor limit unchanged", "err", err)
	} else {
		cfg.Log.Debug("descriptor limit", "soft", soft, "hard", hard)
	}
	if limit, ok := memoryLimit(cfg.MemoryLimit, getenv); ok {
		debug.SetMemoryLimit(limit)
		if limit != math.MaxInt64 {
			stop := make(chan struct{})
			defer close(stop)
			go guardMemoryLimit(limit, gcIsOff(cfg.GCPercent, getenv), 10*time.Second, cfg.Log, stop)
		}
	}
	if percent, ok := gcTarget(cfg.GCPercent, getenv); ok {
		debug.SetGCPercent(percent)
	}
	if n, ok := procsTarget(cfg.MaxProcs, getenv, runtime.GOMAXPROCS(0)); ok {
		runtime.GOMAXPROCS(n)
	}
	cfg.Log.Debug("go runtime settings", "limit_bytes", debug.SetMemoryLimit(-1), "gc_percent", cfg.GCPercent.String(),
		"max_procs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU())
	d, closeKernel, err := newDaemon(cfg)
	if err != nil {
		cfg.Log.Error("dpd cannot start", "err", err)
		return 1
	}
	// Closing releases descriptors only: programs, links and pinned maps
	// stay so the next start adopts them without dropping a packet.
	defer closeKernel()
	if err := d.Run(context.Background()); err != nil {
		cfg.Log.Error("dpd failed", "err", err)
		return 1
	}
	return 0
}
