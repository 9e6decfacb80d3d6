package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client"
	"github.com/dpd-dev/dpd/internal/daemontest"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
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
	// The helper never gets -race: probes must start fast.
	helper := filepath.Join(dir, "nethelper")
	if err := daemontest.Build("./test/e2e/nethelper", helper); err != nil {
		return err
	}
	helperBinary = helper
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
	bin := filepath.Join(dir, "dpd")
	if err := daemontest.Build("./cmd/dpd", bin, race...); err != nil {
		return err
	}
	dpdBinary = bin
	return nil
}

// Daemon is one running dpd process with the linux dataplane, started by
// the shared harness (internal/daemontest) and judged by the test.
type Daemon struct {
	*daemontest.Daemon
	// wire is the generation the controller messages of Client are encoded
	// in; wireClient is Client's own connection for a generation other
	// than the current one.
	wire       string
	wireClient *client.Client
}

// daemonConfig is the suite's dpd: linux dataplane, metrics on a free
// loopback port, debug log, all kept in the test's temp dir except the
// pin directory (bpffs).
func daemonConfig(t testing.TB, pinDir string) daemontest.Config {
	t.Helper()
	dir := t.TempDir()
	return daemontest.Config{
		Binary:      dpdBinary,
		Socket:      filepath.Join(dir, "dpd.sock"),
		PinDir:      pinDir,
		MetricsAddr: "127.0.0.1:0",
		LogLevel:    "debug",
		LogPath:     filepath.Join(dir, "dpd.log"),
	}
}

// SetWire makes the controller messages of later Client calls use
// generation wire (WireCurrent or WireLegacy).
func (d *Daemon) SetWire(wire string) {
	if wire == d.wire {
		return
	}
	d.closeWireClient()
	d.wire = wire
}

// StartDaemon starts dpd with a private socket, metrics port and BPF pin
// directory, waits until it serves gRPC, and registers a cleanup that stops
// it, prints its log if the test failed, and removes the pin directory.
func StartDaemon(t testing.TB, extraArgs ...string) *Daemon {
	t.Helper()
	cfg := daemonConfig(t, fmt.Sprintf("/sys/fs/bpf/dpd-e2e-%d-%d", os.Getpid(), daemonSeq.Add(1)))
	cfg.Extra = extraArgs
	return launchDaemon(t, cfg, true)
}

// launchDaemon starts cfg's dpd for t. Cleanup stops it (a failed stop
// fails t), prints its log if t failed, and, with ownPin, removes its pin
// directory, also after a failed start.
func launchDaemon(t testing.TB, cfg daemontest.Config, ownPin bool) *Daemon {
	t.Helper()
	if dpdBinary == "" {
		t.Fatalf("cannot start dpd: %v", errBuild)
	}
	if ownPin {
		t.Cleanup(func() {
			if err := os.RemoveAll(cfg.PinDir); err != nil {
				t.Errorf("remove pin dir %s: %v", cfg.PinDir, err)
			}
		})
	}
	where := ""
	if cfg.NetNS != "" {
		where = " in " + cfg.NetNS
	}
	dd, err := daemontest.Start(context.Background(), cfg)
	if err != nil {
		keepLog(t, cfg.LogPath, cfg.PinDir)
		t.Fatalf("start dpd%s (%s): %v", where, strings.Join(cfg.Args(), " "), err)
	}
	d := &Daemon{Daemon: dd}
	t.Cleanup(func() {
		d.closeWireClient()
		d.Stop(t)
		if t.Failed() {
			d.reportLog(t)
		}
	})
	t.Logf("started dpd pid %d%s: %s", d.Pid(), where, strings.Join(d.Args, " "))
	return d
}

// Stop sends SIGTERM and waits for a clean exit; a daemon that ignores it is
// killed and the test fails. An exit that was not clean fails the test too,
// because an operator's `systemctl stop` relies on it. A stopped or killed
// daemon is left alone.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	if err := d.Daemon.Stop(); err != nil {
		t.Errorf("%v", err)
	}
}

// Kill ends dpd with SIGKILL (no cleanup of any kind) and waits for it.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	if err := d.Daemon.Kill(); err != nil {
		t.Errorf("%v", err)
	}
}

func (d *Daemon) closeWireClient() {
	if d.wireClient != nil {
		_ = d.wireClient.Close()
		d.wireClient = nil
	}
}

// Client is the test's client of the daemon (closed when the daemon stops).
func (d *Daemon) Client(t testing.TB) *client.Client {
	t.Helper()
	if d.wire != "" && d.wire != WireCurrent {
		if d.wireClient == nil {
			c, err := client.Dial(context.Background(), "unix://"+d.Socket, client.WithLazy(), client.WithDialOptions(wireDialOption(d.wire)...))
			if err != nil {
				t.Fatalf("dial dpd: %v", err)
			}
			d.wireClient = c
		}
		return d.wireClient
	}
	c := d.Daemon.Client()
	if c == nil {
		t.Fatalf("dpd pid %d has stopped: no client", d.Pid())
	}
	return c
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
	c := d.Daemon.Client()
	if c == nil {
		return "(dpd stopped)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.Inspect().ListEndpoints(ctx, &dpdv1.ListEndpointsRequest{})
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
	kept := keepLog(t, d.LogPath, d.PinDir)
	lines := strings.SplitAfter(d.Log(), "\n")
	if len(lines) > logTailLines {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines)\n", len(lines)-logTailLines)}, lines[len(lines)-logTailLines:]...)
	}
	t.Logf("dpd %s\n--- dpd log, whole log kept at %s ---\n%s--- end of dpd log ---",
		strings.Join(d.Args, " "), kept, strings.Join(lines, ""))
}

// keepLog copies a failed test's dpd log under LogKeepDir and says where
// ("(not kept)" if it could not).
func keepLog(t testing.TB, logPath, pinDir string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return "(not kept)"
	}
	dir := LogKeepDir()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + filepath.Base(pinDir) + "-" + filepath.Base(logPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "(not kept)"
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		return "(not kept)"
	}
	return filepath.Join(dir, name)
}
