package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
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
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.Level}))
	cfg.Version = version
	if limit, ok := memoryLimit(cfg.MemoryLimit, getenv); ok {
		debug.SetMemoryLimit(limit)
	}
	cfg.Log.Debug("go memory limit", "bytes", debug.SetMemoryLimit(-1))
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
