package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/linux"
	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/server"
)

// newDaemon picks the kernel named by cfg.Dataplane and builds the daemon
// over it. This is the one place dataplane implementations are wired.
func newDaemon(c config) (*server.Daemon, func(), error) {
	cfg := c.Config
	var k engine.Kernel
	closeKernel := func() {}
	switch cfg.Dataplane {
	case "memory":
		k = memkernel.New()
	case "linux":
		lo := c.Linux
		lo.Log = cfg.Log
		lo.AllowPrivateBPFFS = c.Start.AllowPrivateBPFFS
		if err := checkBPFFS(cfg.Log, lo.PinDir, c.Start.AllowPrivateBPFFS); err != nil {
			return nil, nil, err
		}
		if os.Getenv(linux.CrashAfterAttachEnv) == "1" {
			lo.AfterAttach = crashAfterAttach(cfg.Log)
		}
		lk, err := linux.New(lo)
		if err != nil {
			return nil, nil, err
		}
		k = lk
		closeKernel = func() { _ = lk.Close() }
		cfg.StagedPreview = lo.Flows.StagedPreview
	default:
		return nil, nil, fmt.Errorf("unknown dataplane %q (want memory or linux)", cfg.Dataplane)
	}
	d, err := server.NewDaemon(cfg, k)
	if err != nil {
		closeKernel()
		return nil, nil, err
	}
	return d, closeKernel, nil
}

// crashAfterAttach is the crash tests' hook (linux.CrashAfterAttachEnv):
// dpd exits as a crash between attach and policy install would leave it.
func crashAfterAttach(log *slog.Logger) func(string) {
	if log == nil {
		log = slog.Default()
	}
	return func(iface string) {
		log.Error("test hook: exiting after attach, before the policy install", "env", linux.CrashAfterAttachEnv, "iface", iface)
		os.Exit(linux.CrashExitCode)
	}
}
