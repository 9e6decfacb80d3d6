package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dpd-dev/dpd/client"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Deadlines of the daemon's lifecycle; a healthy dpd needs well under a
// second for either.
const (
	daemonReadyTimeout = 30 * time.Second
	daemonStopTimeout  = 30 * time.Second
)

// daemon is the dpd under measurement: one the driver started, or one it
// attached to (cmd nil).
type daemon struct {
	pid    int
	socket string
	client *client.Client

	cmd     *exec.Cmd
	dir     string // temp dir: socket and log
	pinDir  string
	logPath string
	logFile *os.File
	done    chan struct{} // closed when the process is reaped
	waitErr error         // valid after done
}

// startDaemon runs bin --dataplane=linux inside n with a private socket and
// pin directory under pinRoot, and waits until it serves gRPC. keepLog is
// where a failed start leaves the log ("" nowhere).
func startDaemon(ctx context.Context, bin string, n *node, pinRoot, keepLog string) (*daemon, error) {
	dir, err := os.MkdirTemp("", nsPrefix)
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	d := &daemon{
		dir:     dir,
		socket:  filepath.Join(dir, "dpd.sock"),
		pinDir:  filepath.Join(pinRoot, nsPrefix+strconv.Itoa(os.Getpid())),
		logPath: filepath.Join(dir, "dpd.log"),
		done:    make(chan struct{}),
	}
	if d.logFile, err = os.Create(d.logPath); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("daemon log: %w", err)
	}
	d.cmd = exec.Command(bin,
		"--dataplane=linux",
		"--socket", d.socket,
		"--bpf-pin-dir", d.pinDir,
		"--metrics-addr", "", // its loopback is the node namespace's
		"--log-level", "info",
	)
	d.cmd.Stdout, d.cmd.Stderr = d.logFile, d.logFile
	d.cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // a terminal's Ctrl-C reaches the driver, which stops dpd in order
		Pdeathsig: syscall.SIGTERM, // a driver killed outright still stops its dpd
	}
	if err := n.do(d.cmd.Start); err != nil {
		d.cmd = nil
		_ = d.stop("")
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	d.pid = d.cmd.Process.Pid
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	if err := d.waitReady(ctx); err != nil {
		err = fmt.Errorf("%w\n%s", err, d.logTail(30))
		return nil, errors.Join(err, d.stop(keepLog))
	}
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

func (d *daemon) alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// waitReady polls the standard health service until dpd serves, exits or
// the deadline passes.
func (d *daemon) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, daemonReadyTimeout)
	defer cancel()
	c, err := client.Dial(ctx, d.socket, client.WithLazy())
	if err != nil {
		return err
	}
	d.client = c
	hc := healthpb.NewHealthClient(c.Conn())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if !d.alive() {
			if d.waitErr == nil {
				return errors.New("dpd exited (status 0) before it was ready")
			}
			return fmt.Errorf("dpd exited before it was ready: %w", d.waitErr)
		}
		if _, err := os.Stat(d.socket); err == nil {
			cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
			resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
			ccancel()
			if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dpd not serving on %s: %w", d.socket, ctx.Err())
		case <-d.done:
		case <-tick.C:
		}
	}
}

// stop ends a started dpd with SIGTERM (SIGKILL after the deadline) and
// removes its socket, log (copied to keep first, unless "") and pin
// directory; for an attached one it only closes the connection.
func (d *daemon) stop(keep string) error {
	var errs []error
	if d.client != nil {
		_ = d.client.Close()
		d.client = nil
	}
	if d.cmd != nil && d.cmd.Process != nil {
		if d.alive() {
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			timer := time.NewTimer(daemonStopTimeout)
			select {
			case <-d.done:
				if d.waitErr != nil {
					errs = append(errs, fmt.Errorf("dpd did not exit cleanly: %w", d.waitErr))
				}
			case <-timer.C:
				_ = d.cmd.Process.Kill()
				<-d.done
				errs = append(errs, fmt.Errorf("dpd did not stop within %s of SIGTERM; killed", daemonStopTimeout))
			}
			timer.Stop()
		}
		d.cmd = nil
	}
	if d.logFile != nil {
		_ = d.logFile.Close()
		d.logFile = nil
		if keep != "" {
			if b, err := os.ReadFile(d.logPath); err == nil {
				if err := os.WriteFile(keep, b, 0o644); err != nil {
					errs = append(errs, fmt.Errorf("keep dpd log: %w", err))
				}
			}
		}
	}
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

// logTail is the end of a started daemon's log, for error messages.
func (d *daemon) logTail(lines int) string {
	if d.logPath == "" {
		return ""
	}
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "--- dpd log (tail) ---\n" + strings.Join(all, "\n")
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
