package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dpd-dev/dpd/client"
	"github.com/dpd-dev/dpd/internal/daemontest"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// daemon is the dpd under measurement: one the driver started (proc), or
// one it attached to (proc nil).
type daemon struct {
	pid    int
	socket string
	client *client.Client

	proc   *daemontest.Daemon
	dir    string // temp dir of a started dpd: socket and log
	pinDir string
}

// startDaemon runs bin --dataplane=linux (then extra) inside n with a private socket and
// pin directory under pinRoot, and waits until it serves gRPC. keepLog is
// where a failed start leaves the log ("" nowhere).
func startDaemon(ctx context.Context, bin string, n *node, pinRoot, keepLog string, extra []string) (*daemon, error) {
	dir, err := os.MkdirTemp("", nsPrefix)
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	d := &daemon{dir: dir, pinDir: filepath.Join(pinRoot, nsPrefix+strconv.Itoa(os.Getpid()))}
	cfg := daemontest.Config{
		Binary:  bin,
		Socket:  filepath.Join(dir, "dpd.sock"),
		PinDir:  d.pinDir,
		LogPath: filepath.Join(dir, "dpd.log"),
		NetNS:   n.name,
		// Its loopback is the node namespace's: no metrics listener.
		MetricsAddr: "",
		// A terminal's Ctrl-C reaches the driver, which stops dpd in order;
		// a driver killed outright still stops its dpd.
		OwnGroup: true,
		Extra:    extra,
	}
	if d.proc, err = daemontest.Start(ctx, cfg); err != nil {
		return nil, errors.Join(err, keepFile(cfg.LogPath, keepLog), d.stop(""))
	}
	d.pid, d.socket, d.client = d.proc.Pid(), d.proc.Socket, d.proc.Client()
	return d, nil
}

// attachDaemon connects to a running dpd; its pid comes from GetStatus.
func attachDaemon(ctx context.Context, socket string) (*daemon, error) {
	c, err := client.Dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	st, err := c.Inspect().GetStatus(ctx, &dpdv1.GetStatusRequest{})
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("get status: %w", err)
	}
	if st.GetDataplane() != "linux" {
		_ = c.Close()
		return nil, fmt.Errorf("dpd at %s runs the %q dataplane; the benchmarks need --dataplane=linux", socket, st.GetDataplane())
	}
	return &daemon{pid: int(st.GetPid()), socket: socket, client: c}, nil
}

// stop ends a started dpd with SIGTERM (SIGKILL after the deadline) and
// removes its socket, log (copied to keep first, unless "") and pin
// directory; for an attached one it only closes the connection.
func (d *daemon) stop(keep string) error {
	var errs []error
	if d.proc != nil {
		errs = append(errs, d.proc.Stop(), keepFile(d.proc.LogPath, keep))
		d.proc = nil
	} else if d.client != nil {
		_ = d.client.Close()
	}
	d.client = nil
	if d.pinDir != "" {
		// The pins hold dpd's links and programs; without them the kernel
		// detaches and frees everything (the veths go with the namespace).
		if err := os.RemoveAll(d.pinDir); err != nil {
			errs = append(errs, fmt.Errorf("remove pin dir: %w", err))
		}
		d.pinDir = ""
	}
	if d.dir != "" {
		_ = os.RemoveAll(d.dir)
		d.dir = ""
	}
	return errors.Join(errs...)
}

// logTail is the end of a started daemon's log, for error messages ("" for
// an attached one).
func (d *daemon) logTail(lines int) string {
	if d.proc == nil {
		return ""
	}
	return d.proc.LogTail(lines)
}

// keepFile copies dpd's log at from to to ("" keeps nothing).
func keepFile(from, to string) error {
	if to == "" {
		return nil
	}
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o644)
	}
	if err != nil {
		return fmt.Errorf("keep dpd log: %w", err)
	}
	return nil
}

// memory reads a process's peak and current resident set (VmHWM, VmRSS)
// in bytes.
func memory(pid int) (peak, current uint64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse %s %q: %w", k, v, err)
		}
		if k == "VmHWM" {
			peak = kb << 10
		} else {
			current = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if peak == 0 {
		return 0, 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return peak, current, nil
}
