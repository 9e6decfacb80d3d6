package testutil

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestPrivilegedLockSurvivesGC: the machine-wide lock stays held after
// garbage collections have run every pending finalizer; another holder
// (here a second open file description) cannot take it.
func TestPrivilegedLockSurvivesGC(t *testing.T) {
	RequirePrivileged(t)
	for range 3 {
		collectAndFinalize()
	}
	f, err := os.Open(privilegedLockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		t.Fatal("the privileged lock was free after a garbage collection: other test binaries run at the same time")
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("probe the privileged lock: %v", err)
	}
}

// collectAndFinalize runs a collection and waits until the finalizers it
// queued have run: a sentinel's own finalizer runs on the same goroutine,
// after those queued before it.
func collectAndFinalize() {
	done := make(chan struct{})
	runtime.SetFinalizer(new([16]byte), func(*[16]byte) { close(done) })
	runtime.GC()
	<-done
}

// TestPrivilegedLockChild: a test binary the lock holder starts runs under
// its lock instead of waiting for its own parent to exit.
func TestPrivilegedLockChild(t *testing.T) {
	if os.Getenv("DPD_LOCK_CHILD") == "1" {
		RequirePrivileged(t) // would block for good without the holder check
		return
	}
	RequirePrivileged(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPrivilegedLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DPD_LOCK_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child test binary under the holder: %v\n%s", err, out)
	}
}

// TestUnderHolder: only an ancestor named in the environment counts.
func TestUnderHolder(t *testing.T) {
	for _, c := range []struct {
		env  string
		want bool
	}{{strconv.Itoa(os.Getppid()), true}, {strconv.Itoa(os.Getpid()), false}, {"1", false}, {"x", false}, {"", false}} {
		t.Setenv(lockHolderEnv, c.env)
		if got := underHolder(); got != c.want {
			t.Errorf("holder %q: under it %v, want %v", c.env, got, c.want)
		}
	}
}
