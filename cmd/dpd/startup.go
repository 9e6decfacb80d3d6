package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/dpd-dev/dpd/internal/bpffs"
)

// startFlags are the flags that act before the daemon starts.
type startFlags struct {
	// AllowPrivateBPFFS accepts a bpffs only dpd's mount namespace sees.
	AllowPrivateBPFFS bool
}

func (s *startFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.AllowPrivateBPFFS, "allow-private-bpffs", false, "start even when the bpffs for --bpf-pin-dir is private to dpd's mount namespace (as under 'ip netns exec', or in a container without the host's /sys/fs/bpf): its pins die with dpd")
}

// checkBPFFS makes sure the pin directory is on a bpffs the host shares
// (see package bpffs) and logs what it found.
func checkBPFFS(log *slog.Logger, pinDir string, allowPrivate bool) error {
	r, err := bpffs.Check(pinDir, bpffs.Options{AllowPrivate: allowPrivate})
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if r.Found == bpffs.FoundPrivate {
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, "bpffs", "pin_dir", r.PinDir, "found", r.Found, "mount", r.Mount, "device", r.Device,
		"mount_id", r.MountID, "mount_ns", r.MountNS, "why", r.Why)
	return nil
}
