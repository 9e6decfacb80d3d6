package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/dpd-dev/dpd/internal/bpffs"
)

// commit is set at build time (-ldflags "-X main.commit=<sha>"); without
// it the commit comes from the Go toolchain's VCS stamp, if any.
var commit = ""

// startFlags are the flags that act before the daemon starts.
type startFlags struct {
	// AllowPrivateBPFFS accepts a bpffs only dpd's mount namespace sees.
	AllowPrivateBPFFS bool
	// Version prints the build and exits.
	Version bool
	// InstallTo copies the running binary there and exits.
	InstallTo string
}

func (s *startFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.AllowPrivateBPFFS, "allow-private-bpffs", false, "start even when the bpffs for --bpf-pin-dir is private to dpd's mount namespace (as under 'ip netns exec', or in a container without the host's /sys/fs/bpf): its pins die with dpd")
	fs.BoolVar(&s.Version, "version", false, "print the build (version, commit, Go version) and exit")
	fs.StringVar(&s.InstallTo, "install-to", "", "copy this dpd binary to `path` (atomically, mode 0755) and exit; how an init container places dpd into another container from an image without a shell")
}

// act does what the start-up flags ask instead of running the daemon;
// done says whether it did, code is then the exit code.
func (s startFlags) act(out, errOut io.Writer) (code int, done bool) {
	switch {
	case s.Version:
		_, _ = fmt.Fprintln(out, buildInfo())
		return 0, true
	case s.InstallTo != "":
		if err := installTo(s.InstallTo); err != nil {
			_, _ = fmt.Fprintln(errOut, "dpd:", err)
			return 1, true
		}
		_, _ = fmt.Fprintf(out, "dpd: installed %s as %s\n", buildInfo(), s.InstallTo)
		return 0, true
	}
	return 0, false
}

// buildInfo names the build: version, commit (marked +dirty for a
// modified tree), Go version and platform.
func buildInfo() string {
	v, rev, dirty := version, commit, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && rev == "":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "+dirty"
			}
		}
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	return fmt.Sprintf("dpd %s (commit %s%s, %s %s/%s)", v, rev, dirty, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// installTo copies the running executable to dst by a rename, so a
// container already running an older copy keeps it intact.
func installTo(dst string) error {
	src, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open own binary: %w", err)
	}
	defer func() { _ = in.Close() }()
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".dpd-install-*")
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("install: copy to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("install: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("install: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
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
