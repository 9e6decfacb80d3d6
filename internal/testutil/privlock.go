package testutil

import (
	"os"
	"sync"
	"syscall"
	"testing"
)

// privilegedLockPath serialises privileged test binaries machine-wide: they
// create cali* interfaces and start dataplanes that fail-close every cali*
// interface they see, so two such binaries (two checkouts tested at once)
// would break each other's tests.
const privilegedLockPath = "/tmp/dpd-privileged-tests.lock"

var privilegedLock struct {
	once sync.Once
	err  error
	// f holds the lock: an *os.File nothing references is closed by its
	// finalizer at the next garbage collection, which releases the flock
	// while the binary still runs.
	f *os.File
}

// lockPrivileged takes the machine-wide lock on first use and holds it until
// the test binary exits; the kernel releases a flock with its holder.
func lockPrivileged(t testing.TB) {
	t.Helper()
	privilegedLock.once.Do(func() {
		f, err := os.OpenFile(privilegedLockPath, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			privilegedLock.err = err
			return
		}
		privilegedLock.err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		privilegedLock.f = f // kept open (and reachable) until exit
	})
	if privilegedLock.err != nil {
		t.Fatalf("privileged test lock %s: %v", privilegedLockPath, privilegedLock.err)
	}
}
