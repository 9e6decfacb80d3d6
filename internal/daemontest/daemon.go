package daemontest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/dpd-dev/dpd/client"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Deadlines of the daemon's lifecycle when Config leaves them zero. They
// are deadlines, not expectations: a healthy dpd is ready, and stops, in
// well under a second.
const (
	DefaultReadyTimeout = 30 * time.Second
	DefaultStopTimeout  = 30 * time.Second
)

// Config says which dpd to start and how.
type Config struct {
	// Binary is the dpd executable.
	Binary string
	// Dataplane is --dataplane ("" is linux).
	Dataplane string
	// Socket is --socket, the Unix socket readiness is checked on.
	Socket string
	// PinDir is --bpf-pin-dir ("" leaves dpd's default). The caller owns
	// the directory: several daemons may share it one after the other.
	PinDir string
	// MetricsAddr is --metrics-addr; "" disables the metrics listener.
	MetricsAddr string
	// LogLevel is --log-level ("" is info).
	LogLevel string
	// Extra flags follow the ones above (a repeated flag overrides).
	Extra []string
	// Env is added to the harness's environment.
	Env []string
	// LogPath receives dpd's stdout and stderr (created or truncated).
	LogPath string
	// NetNS is a named network namespace (/var/run/netns/NAME) to run dpd
	// in, entered with nsenter, which switches only the network namespace
	// (bpffs and the harness's files stay visible) and then executes dpd
	// under its own pid. "" runs dpd in the harness's namespace.
	NetNS string
	// Wrap runs dpd under a command (its argv, then dpd's), such as
	// unshare; empty runs dpd directly. Not combined with NetNS.
	Wrap []string
	// OwnGroup puts dpd in a process group of its own, so a terminal's
	// Ctrl-C reaches only the harness, which then stops dpd in order, and
	// sends it SIGTERM when the OS thread that started it exits, so a
	// harness killed outright still stops it. Only for a harness that
	// never lets a locked OS thread exit (netns helpers often do): that
	// would stop dpd under it.
	OwnGroup bool
	// ReadyTimeout and StopTimeout bound the start and the SIGTERM stop
	// (0: DefaultReadyTimeout, DefaultStopTimeout).
	ReadyTimeout, StopTimeout time.Duration
}

// Args is dpd's command line (without the program name).
func (c Config) Args() []string {
	dataplane, level := c.Dataplane, c.LogLevel
	if dataplane == "" {
		dataplane = "linux"
	}
	if level == "" {
		level = "info"
	}
	args := []string{"--dataplane=" + dataplane, "--socket", c.Socket, "--metrics-addr", c.MetricsAddr}
	if c.PinDir != "" {
		args = append(args, "--bpf-pin-dir", c.PinDir)
	}
	args = append(args, "--log-level", level)
	return append(args, c.Extra...)
}

// Daemon is one dpd process started by Start. Its exported fields are
// read-only.
type Daemon struct {
	Socket  string
	PinDir  string
	LogPath string
	Args    []string // dpd's flags

	stopTimeout time.Duration
	cmd         *exec.Cmd
	logFile     *os.File
	client      *client.Client
	done        chan struct{} // closed when the process has been reaped
	waitErr     error         // valid once done is closed
	ended       bool          // Stop, Kill or WaitExit saw the exit
}

// Start runs dpd per cfg and waits until it serves the gRPC health service
// on its socket, it exits, ctx ends or the ready deadline passes. On
// failure dpd is stopped, and the error carries the end of its log.
func Start(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Binary == "" || cfg.Socket == "" || cfg.LogPath == "" {
		return nil, errors.New("daemontest: Binary, Socket and LogPath are required")
	}
	d := &Daemon{
		Socket:      cfg.Socket,
		PinDir:      cfg.PinDir,
		LogPath:     cfg.LogPath,
		Args:        cfg.Args(),
		stopTimeout: cfg.StopTimeout,
		done:        make(chan struct{}),
	}
	if d.stopTimeout <= 0 {
		d.stopTimeout = DefaultStopTimeout
	}
	if cfg.NetNS != "" && len(cfg.Wrap) > 0 {
		return nil, fmt.Errorf("daemon config: NetNS and Wrap are exclusive")
	}
	var err error
	if d.logFile, err = os.Create(cfg.LogPath); err != nil {
		return nil, fmt.Errorf("create dpd log: %w", err)
	}
	argv := append([]string{cfg.Binary}, d.Args...)
	switch {
	case cfg.NetNS != "":
		argv = append([]string{"nsenter", "--net=/var/run/netns/" + cfg.NetNS}, argv...)
	case len(cfg.Wrap) > 0:
		argv = append(append([]string(nil), cfg.Wrap...), argv...)
	}
	d.cmd = exec.Command(argv[0], argv[1:]...)
	if len(cfg.Env) > 0 {
		d.cmd.Env = append(os.Environ(), cfg.Env...)
	}
	d.cmd.Stdout, d.cmd.Stderr = d.logFile, d.logFile
	if cfg.OwnGroup {
		d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	}
	if err := d.cmd.Start(); err != nil {
		_ = d.logFile.Close()
		return nil, fmt.Errorf("start %s: %w", cfg.Binary, err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	// A lazy client cannot fail to dial a Unix socket path; it connects
	// when the health check first asks.
	if d.client, err = client.Dial(ctx, "unix://"+d.Socket, client.WithLazy()); err == nil {
		err = d.waitReady(ctx, cfg.ReadyTimeout)
	}
	if err != nil {
		err = fmt.Errorf("%w\n%s", err, d.LogTail(30))
		return nil, errors.Join(err, d.Stop())
	}
	return d, nil
}

// waitReady polls the standard health service, which dpd always serves,
// until it answers SERVING, dpd exits, or the deadline passes.
func (d *Daemon) waitReady(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := healthpb.NewHealthClient(d.client.Conn())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if !d.Alive() {
			return fmt.Errorf("dpd exited before it was ready: %s", exitText(d.waitErr))
		}
		if _, err := os.Stat(d.Socket); err == nil {
			cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
			resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
			ccancel()
			if status.Code(err) == codes.Unimplemented {
				return fmt.Errorf("dpd on %s does not serve grpc.health.v1", d.Socket)
			}
			if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dpd not serving on %s within %s: %w", d.Socket, timeout, ctx.Err())
		case <-d.done:
		case <-tick.C:
		}
	}
}

// Client is the harness's client of the daemon, connected to its socket.
// Stop, Kill and Close close it.
func (d *Daemon) Client() *client.Client { return d.client }

// Pid is the daemon's process id (nsenter executes dpd in its own place).
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Alive reports whether the process is still running.
func (d *Daemon) Alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits for dpd to exit, killing it after the stop
// deadline. It fails when dpd had already exited on its own, did not exit
// with status 0, or had to be killed: an operator's `systemctl stop`
// relies on a clean exit. A second call, or one after Kill or WaitExit,
// does nothing.
func (d *Daemon) Stop() error {
	if d.ended {
		return nil
	}
	defer d.release()
	d.ended = true
	if !d.Alive() {
		return fmt.Errorf("dpd exited on its own before it was stopped: %s", exitText(d.waitErr))
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return errors.Join(fmt.Errorf("signal dpd: %w", err), d.kill())
	}
	timer := time.NewTimer(d.stopTimeout)
	defer timer.Stop()
	select {
	case <-d.done:
		if d.waitErr != nil {
			return fmt.Errorf("dpd did not exit cleanly on SIGTERM: %w", d.waitErr)
		}
		return nil
	case <-timer.C:
		return errors.Join(fmt.Errorf("dpd did not exit within %s of SIGTERM; killed", d.stopTimeout), d.kill())
	}
}

// Kill ends dpd with SIGKILL, as a crash or an OOM kill would: no cleanup
// of any kind. It waits until the process is reaped. After Stop or
// WaitExit it does nothing, so it is the cleanup backstop of every start.
func (d *Daemon) Kill() error {
	if d.ended {
		return nil
	}
	defer d.release()
	d.ended = true
	return d.kill()
}

func (d *Daemon) kill() error {
	if err := d.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill dpd: %w", err)
	}
	<-d.done
	return nil
}

// WaitExit waits up to timeout for dpd to exit on its own and returns its
// exit code (-1 when a signal ended it).
func (d *Daemon) WaitExit(timeout time.Duration) (int, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-d.done:
	case <-timer.C:
		return 0, fmt.Errorf("dpd did not exit within %s", timeout)
	}
	if !d.ended {
		d.ended = true
		d.release()
	}
	return d.cmd.ProcessState.ExitCode(), nil
}

// release closes what the harness holds of a daemon that has exited.
func (d *Daemon) release() {
	if d.client != nil {
		_ = d.client.Close()
		d.client = nil
	}
	if d.logFile != nil {
		_ = d.logFile.Close()
		d.logFile = nil
	}
}

// Log is the daemon's log so far.
func (d *Daemon) Log() string {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read dpd log: %v)\n", err)
	}
	return string(b)
}

// LogTail is the last lines of the log, headed for an error message.
func (d *Daemon) LogTail(lines int) string {
	all := strings.Split(strings.TrimRight(d.Log(), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "--- dpd log (tail) ---\n" + strings.Join(all, "\n")
}

// exitText says how a process ended, for messages.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
