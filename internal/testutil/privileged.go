// Package testutil holds helpers shared by dpd's privileged tests: a guard
// that skips without root outside CI and fails inside it, network namespaces
// per test, and condition waits with deadlines (never sleeps).
package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/bpffs"
)

// RequirePrivileged skips t unless it runs as root with bpffs mounted. Under
// CI=true it fails instead, so CI proves privileged tests ran.
func RequirePrivileged(t testing.TB) {
	t.Helper()
	reason := ""
	if os.Geteuid() != 0 {
		reason = "needs root"
	} else if err := bpffs.Ensure(bpffs.Options{}); err != nil {
		reason = "needs bpffs at /sys/fs/bpf: " + err.Error()
	}
	if reason == "" {
		lockPrivileged(t)
		return
	}
	CannotRun(t, "privileged test", reason)
}

// CannotRun skips t, which cannot run here for reason (what lacks: root,
// IPv6, a kernel feature); under CI=true it fails t instead, so CI proves
// every test ran.
func CannotRun(t testing.TB, what, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s cannot run (%s) and CI=true forbids skipping", what, reason)
	}
	t.Skipf("%s skipped: %s", what, reason)
}

// WaitFor polls cond every 10 ms until it returns true or timeout passes,
// then fails t with msg.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Run runs a command and fails t with its output on error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
