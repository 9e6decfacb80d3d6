package daemontest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/server/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// fakeEnv makes the test binary a stand-in for dpd (see fakeDPD), so the
// harness's failure paths can be driven without a real daemon misbehaving.
const fakeEnv = "DAEMONTEST_FAKE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakeDPD(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeDPD plays a dpd per mode:
//
//	serve        serve grpc.health.v1 on --socket; exit 0 on SIGTERM, 4 on SIGUSR1
//	ignore-term  serve, and ignore SIGTERM
//	no-health    serve gRPC without the health service
//	silent       never listen; exit 0 on SIGTERM
//	fail         print "boom" and exit 3
func fakeDPD(mode string, args []string) int {
	fs := flag.NewFlagSet("fake-dpd", flag.ContinueOnError)
	socket := fs.String("socket", "", "")
	fs.String("dataplane", "", "")
	fs.String("metrics-addr", "", "")
	fs.String("bpf-pin-dir", "", "")
	fs.String("log-level", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1)
	switch mode {
	case "fail":
		fmt.Println("boom")
		return 3
	case "silent":
		<-sigs
		return 0
	}
	lis, err := net.Listen("unix", *socket)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	srv := grpc.NewServer()
	if mode != "no-health" {
		healthpb.RegisterHealthServer(srv, health.NewServer())
	}
	go func() { _ = srv.Serve(lis) }()
	fmt.Println("fake dpd serving")
	for sig := range sigs {
		switch {
		case sig == syscall.SIGUSR1:
			return 4
		case mode != "ignore-term":
			srv.Stop()
			return 0
		}
	}
	return 1
}

// fake is a Config that runs the test binary as the fake dpd in mode.
func fake(t *testing.T, mode string) Config {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Binary:       self,
		Socket:       servertest.SocketPath(t),
		LogPath:      filepath.Join(t.TempDir(), "dpd.log"),
		Env:          []string{fakeEnv + "=" + mode},
		ReadyTimeout: 10 * time.Second,
		StopTimeout:  10 * time.Second,
	}
}

func start(t *testing.T, cfg Config) *Daemon {
	t.Helper()
	d, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = d.Kill() })
	return d
}

func TestStartThenStop(t *testing.T) {
	d := start(t, fake(t, "serve"))
	if !d.Alive() || d.Client() == nil {
		t.Fatalf("alive %v, client %v", d.Alive(), d.Client())
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if d.Alive() || d.Client() != nil {
		t.Errorf("after Stop: alive %v, client %v", d.Alive(), d.Client())
	}
	if err := d.Stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
	if !strings.Contains(d.Log(), "fake dpd serving") {
		t.Errorf("log lacks the daemon's output: %q", d.Log())
	}
}

func TestStartFailures(t *testing.T) {
	tests := []struct {
		mode  string
		ready time.Duration
		want  []string
	}{
		{"fail", 10 * time.Second, []string{"exited before it was ready", "exit status 3", "dpd log (tail)", "boom"}},
		{"silent", 200 * time.Millisecond, []string{"not serving on", "deadline exceeded"}},
		{"no-health", 10 * time.Second, []string{"does not serve grpc.health.v1"}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			cfg := fake(t, tt.mode)
			cfg.ReadyTimeout = tt.ready
			d, err := Start(context.Background(), cfg)
			if err == nil {
				_ = d.Kill()
				t.Fatal("Start succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

func TestStartCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Start(ctx, fake(t, "silent"))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// TestStopKillsAfterDeadline: a dpd that ignores SIGTERM is killed, and
// Stop says so.
func TestStopKillsAfterDeadline(t *testing.T) {
	cfg := fake(t, "ignore-term")
	cfg.StopTimeout = 200 * time.Millisecond
	d := start(t, cfg)
	err := d.Stop()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("stop: %v, want a kill reported", err)
	}
	if d.Alive() {
		t.Error("still alive after Stop")
	}
}

// TestExitOnItsOwn: an exit the harness did not ask for is an error of
// Stop, and WaitExit reports its code.
func TestExitOnItsOwn(t *testing.T) {
	d := start(t, fake(t, "serve"))
	if err := syscall.Kill(d.Pid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	<-d.Done()
	err := d.Stop()
	if err == nil || !strings.Contains(err.Error(), "exited on its own") || !strings.Contains(err.Error(), "exit status 4") {
		t.Errorf("stop: %v", err)
	}

	d = start(t, fake(t, "serve"))
	if _, err := d.WaitExit(100 * time.Millisecond); err == nil {
		t.Error("WaitExit returned for a running dpd")
	}
	if err := syscall.Kill(d.Pid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	code, err := d.WaitExit(10 * time.Second)
	if err != nil || code != 4 {
		t.Errorf("WaitExit: %d, %v; want 4", code, err)
	}
	if err := d.Stop(); err != nil {
		t.Errorf("stop after WaitExit: %v", err)
	}
}

func TestKill(t *testing.T) {
	d := start(t, fake(t, "ignore-term"))
	if err := d.Kill(); err != nil {
		t.Fatal(err)
	}
	if d.Alive() {
		t.Error("alive after Kill")
	}
	if code, err := d.WaitExit(time.Second); err != nil || code != -1 {
		t.Errorf("WaitExit after Kill: %d, %v; want -1 (signalled)", code, err)
	}
}

func TestArgs(t *testing.T) {
	got := Config{Socket: "/s", MetricsAddr: "", PinDir: "/p", Extra: []string{"--force-legacy-tc"}}.Args()
	want := []string{"--dataplane=linux", "--socket", "/s", "--metrics-addr", "", "--bpf-pin-dir", "/p", "--log-level", "info", "--force-legacy-tc"}
	if !slices.Equal(got, want) {
		t.Errorf("args %q, want %q", got, want)
	}
	got = Config{Dataplane: "memory", Socket: "/s", MetricsAddr: "127.0.0.1:0", LogLevel: "debug"}.Args()
	want = []string{"--dataplane=memory", "--socket", "/s", "--metrics-addr", "127.0.0.1:0", "--log-level", "debug"}
	if !slices.Equal(got, want) {
		t.Errorf("args %q, want %q", got, want)
	}
}

// TestRealDPD starts the real binary (memory dataplane, no root needed)
// with the harness's flags: dpd must accept them, serve health, and exit
// 0 on SIGTERM.
func TestRealDPD(t *testing.T) {
	if testing.Short() {
		t.Skip("builds dpd")
	}
	bin := filepath.Join(t.TempDir(), "dpd")
	if err := Build("./cmd/dpd", bin); err != nil {
		t.Fatal(err)
	}
	d := start(t, Config{
		Binary:    bin,
		Dataplane: "memory",
		Socket:    servertest.SocketPath(t),
		LogPath:   filepath.Join(t.TempDir(), "dpd.log"),
	})
	if err := d.Stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, d.LogTail(30))
	}
}
