package testutil

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"
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
