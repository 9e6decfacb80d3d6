package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client"
	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Timeouts of the daemon lifecycle. They are deadlines, not expectations:
// a healthy daemon is ready and stops in well under a second.
const (
	daemonReadyTimeout = 20 * time.Second
	daemonStopTimeout  = 10 * time.Second
)

var (
	// dpdBinary and helperBinary are built by TestMain; errBuild says why
	// they are missing.
	dpdBinary    string
	helperBinary string
	errBuild     = errors.New("binaries not built (TestMain did not run the build)")
	daemonSeq    atomic.Uint32
)

// BuildBinaries builds ./cmd/dpd and the suite's ./test/e2e/nethelper into
// dir and records their paths for StartDaemon and the probes. Set
// DPD_E2E_RACE=1 to build dpd with the race detector, or
// DPD_E2E_BINARY=/path/to/dpd to test a prebuilt dpd instead.
func BuildBinaries(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil && os.Getenv("GOROOT") != "" {
		goBin, err = filepath.Join(os.Getenv("GOROOT"), "bin", "go"), nil
	}
	if err != nil {
		return fmt.Errorf("find the go command: %w", err)
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("go env GOMOD: not inside a module")
	}
	build := func(pkg, name string, extra ...string) (string, error) {
		bin := filepath.Join(dir, name)
		args := append([]string{"build", "-o", bin}, extra...)
		cmd := exec.Command(goBin, append(args, pkg)...)
		cmd.Dir = filepath.Dir(gomod)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
		return bin, nil
	}
	// The helper never gets -race: probes must start fast.
	if helperBinary, err = build("./test/e2e/nethelper", "nethelper"); err != nil {
		return err
	}
	if bin := os.Getenv("DPD_E2E_BINARY"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("DPD_E2E_BINARY: %w", err)
		}
		dpdBinary = bin
		return nil
	}
	var race []string
	if os.Getenv("DPD_E2E_RACE") == "1" {
		race = []string{"-race"}
	}
	dpdBinary, err = build("./cmd/dpd", "dpd", race...)
	return err
}

// Daemon is one running dpd process with the linux dataplane.
type Daemon struct {
	Socket  string
	PinDir  string
	LogPath string
	Args    []string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{} // closed when the process has been reaped
	waitErr error         // valid after done is closed
	stopped bool          // Stop ran (only touched by the test goroutine)
	client  *client.Client
	wire    string // the generation Client's controller messages are encoded in
}

// SetWire makes the controller messages of later Client calls use
// generation wire (WireCurrent or WireLegacy).
func (d *Daemon) SetWire(wire string) {
	if wire == d.wire {
		return
	}
	if d.client != nil {
		_ = d.client.Close()
		d.client = nil
	}
	d.wire = wire
}

// StartDaemon starts dpd with a private socket, metrics port and BPF pin
// directory, waits until it serves gRPC, and registers a cleanup that stops
// it, prints its log if the test failed, and removes the pin directory.
func StartDaemon(t testing.TB, extraArgs ...string) *Daemon {
	t.Helper()
	pinDir := fmt.Sprintf("/sys/fs/bpf/dpd-e2e-%d-%d", os.Getpid(), daemonSeq.Add(1))
	return launchDaemon(t, pinDir, "", extraArgs)
}

// launchDaemon is StartDaemon with the pin directory given, run inside the
// named network namespace netns unless it is "" (by nsenter, which switches
// only the network namespace: bpffs and the test's temp dirs stay visible).
func launchDaemon(t testing.TB, pinDir, netns string, extraArgs []string) *Daemon {
	t.Helper()
	if dpdBinary == "" {
		t.Fatalf("cannot start dpd: %v", errBuild)
	}
	dir := t.TempDir()
	d := &Daemon{
		Socket:  filepath.Join(dir, "dpd.sock"),
		PinDir:  pinDir,
		LogPath: filepath.Join(dir, "dpd.log"),
		done:    make(chan struct{}),
	}
	d.Args = append([]string{
		"--dataplane=linux",
		"--socket", d.Socket,
		"--metrics-addr", "127.0.0.1:0",
		"--bpf-pin-dir", d.PinDir,
		"--log-level", "debug",
	}, extraArgs...)
	logFile, err := os.Create(d.LogPath)
	if err != nil {
		t.Fatalf("create daemon log: %v", err)
	}
	d.logFile = logFile
	where := ""
	if netns == "" {
		d.cmd = exec.Command(dpdBinary, d.Args...)
	} else {
		where = " in " + netns
		d.cmd = exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + netns, dpdBinary}, d.Args...)...)
	}
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	// Registered before Start so a failed start still removes the pin dir.
	t.Cleanup(func() {
		d.Stop(t)
		if d.client != nil {
			_ = d.client.Close()
		}
		if t.Failed() {
			d.reportLog(t)
		}
		_ = logFile.Close()
		if err := os.RemoveAll(d.PinDir); err != nil {
			t.Errorf("remove pin dir %s: %v", d.PinDir, err)
		}
	})
	if err := d.cmd.Start(); err != nil {
		close(d.done)
		d.stopped = true
		t.Fatalf("start dpd%s: %v", where, err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.done)
	}()
	t.Logf("started dpd pid %d%s: %s", d.cmd.Process.Pid, where, strings.Join(d.Args, " "))
	d.waitReady(t)
	return d
}

// waitReady polls the standard gRPC health service, which dpd always serves,
// until the daemon answers or exits.
func (d *Daemon) waitReady(t testing.TB) {
	t.Helper()
	testutil.WaitFor(t, daemonReadyTimeout, "dpd to serve gRPC on "+d.Socket, func() bool {
		if !d.Alive() {
			t.Fatalf("dpd exited before it was ready: %v", d.waitErr)
		}
		if _, err := os.Stat(d.Socket); err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		resp, err := healthpb.NewHealthClient(d.Client(t).Conn()).Check(ctx, &healthpb.HealthCheckRequest{})
		// Unimplemented still proves the server is up; the design says health
		// is always on, so note it for the report without failing here.
		if status.Code(err) == codes.Unimplemented {
			t.Logf("dpd does not serve grpc.health.v1 (design says it always does)")
			return true
		}
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

// Client is the test's client of the daemon (client.Dial on the socket),
// created lazily so it can be made before the daemon listens.
func (d *Daemon) Client(t testing.TB) *client.Client {
	t.Helper()
	if d.client == nil {
		c, err := client.Dial(context.Background(), "unix://"+d.Socket, client.WithLazy(), client.WithDialOptions(wireDialOption(d.wire)...))
		if err != nil {
			t.Fatalf("dial dpd: %v", err)
		}
		d.client = c
	}
	return d.client
}

// Endpoints asks dpd's Inspect service for its endpoints.
func (d *Daemon) Endpoints(t testing.TB) ([]*dpdv1.Endpoint, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := d.Client(t).Inspect().ListEndpoints(ctx, &dpdv1.ListEndpointsRequest{})
	return resp.GetEndpoints(), err
}

// ExplainEndpoints renders dpd's own view of its endpoints (status and
// reason) for failure messages.
func (d *Daemon) ExplainEndpoints() string {
	if d.client == nil {
		return "(no client)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := d.client.Inspect().ListEndpoints(ctx, &dpdv1.ListEndpointsRequest{})
	if err != nil {
		return fmt.Sprintf("(Inspect/ListEndpoints: %v)", err)
	}
	var parts []string
	for _, ep := range resp.GetEndpoints() {
		parts = append(parts, fmt.Sprintf("%s iface=%s status=%s reason=%q",
			endpointKey(ep.GetId()), ep.GetInterface(), ep.GetStatus(), ep.GetReason()))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// Alive reports whether the process is still running.
func (d *Daemon) Alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// Pid is the daemon's process id.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Stop sends SIGTERM and waits for a clean exit; a daemon that ignores it is
// killed and the test fails. An exit that was not clean fails the test too,
// because an operator's `systemctl stop` relies on it.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	if d.stopped {
		return
	}
	d.stopped = true
	if !d.Alive() {
		t.Errorf("dpd exited on its own before the test stopped it: %v", d.waitErr)
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(daemonStopTimeout)
	defer timer.Stop()
	select {
	case <-d.done:
		if d.waitErr != nil {
			t.Errorf("dpd did not exit cleanly on SIGTERM: %v", d.waitErr)
		}
	case <-timer.C:
		t.Errorf("dpd did not exit within %s of SIGTERM; killing it", daemonStopTimeout)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// logTailLines is how much of the daemon's log a failure prints; the whole
// log is kept under LogKeepDir.
const logTailLines = 300

// LogKeepDir is where the logs of failed tests are kept (the test's temp
// dir is removed with it). DPD_E2E_LOG_DIR overrides it.
func LogKeepDir() string {
	if dir := os.Getenv("DPD_E2E_LOG_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(os.TempDir(), "dpd-e2e-logs")
}

// reportLog prints the tail of the log and keeps the whole of it.
func (d *Daemon) reportLog(t testing.TB) {
	log := d.Log()
	kept := "(not kept)"
	dir := LogKeepDir()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + filepath.Base(d.PinDir) + ".log"
	if err := os.MkdirAll(dir, 0o755); err == nil {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(log), 0o644); err == nil {
			kept = filepath.Join(dir, name)
		}
	}
	lines := strings.SplitAfter(log, "\n")
	if len(lines) > logTailLines {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines)\n", len(lines)-logTailLines)}, lines[len(lines)-logTailLines:]...)
	}
	t.Logf("dpd %s\n--- dpd log, whole log kept at %s ---\n%s--- end of dpd log ---",
		strings.Join(d.Args, " "), kept, strings.Join(lines, ""))
}

// Log returns the daemon's log so far.
func (d *Daemon) Log() string {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)\n", err)
	}
	return string(b)
}
