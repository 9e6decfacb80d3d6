package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/server/servertest"
)

// syncBuffer is a bytes.Buffer the child's output copier and the test may
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func goBuild(t *testing.T, out, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
}

// TestDaemonBinary builds dpd and dpdctl, runs dpd with the memory
// dataplane, applies examples/basic.yaml with dpdctl (three endpoints up),
// then stops dpd with SIGTERM: it must drain and exit 0 within 5 s.
func TestDaemonBinary(t *testing.T) {
	bin := t.TempDir()
	dpd, dpdctl := filepath.Join(bin, "dpd"), filepath.Join(bin, "dpdctl")
	goBuild(t, dpd, ".")
	goBuild(t, dpdctl, "../dpdctl")

	socket := servertest.SocketPath(t)
	var stderr syncBuffer
	cmd := exec.Command(dpd, "--dataplane=memory", "--socket", socket, "--metrics-addr", "127.0.0.1:0")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	testutil.WaitFor(t, 30*time.Second, "dpd's socket", func() bool {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("dpd exited early: %v\n%s", err, stderr.String())
		default:
		}
		_, err := os.Stat(socket)
		return err == nil
	})

	out, err := exec.Command(dpdctl, "--socket", socket, "apply", "-f", "../../examples/basic.yaml", "--fail-on-error").CombinedOutput()
	if err != nil {
		t.Fatalf("dpdctl apply: %v\n%s\ndpd:\n%s", err, out, stderr.String())
	}
	if n := strings.Count(string(out), " up\n"); n != 3 {
		t.Errorf("dpdctl apply reported %d endpoints up, want 3:\n%s", n, out)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("dpd exited with %v after SIGTERM, want 0\n%s", err, stderr.String())
		}
	case <-time.After(5 * time.Second): // the daemon's drain contract
		t.Fatalf("dpd did not exit within 5 s of SIGTERM\n%s", stderr.String())
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

// TestLinuxFlags: the linux dataplane's options come from flags and env.
func TestLinuxFlags(t *testing.T) {
	env := map[string]string{"DPD_FORCE_LEGACY_TC": "true"}
	c, err := parseFlags([]string{"--socket", servertest.SocketPath(t), "--bpf-pin-dir", "/sys/fs/bpf/x"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Dataplane != "linux" || c.Linux.PinDir != "/sys/fs/bpf/x" || !c.Linux.ForceLegacyTC {
		t.Errorf("config = %+v", c)
	}
}
