package testutil

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// privilegedLockPath serialises privileged test binaries machine-wide: they
// create cali* interfaces and start dataplanes that fail-close every cali*
// interface they see, so two such binaries (two checkouts tested at once)
// would break each other's tests.
const privilegedLockPath = "/tmp/dpd-privileged-tests.lock"

// lockHolderEnv names the process holding the lock, for the test binaries
// it starts (the benchmark driver runs `go test -bench` of other
// packages): a child of the holder runs under its lock, where taking it
// again would wait for its own parent forever.
const lockHolderEnv = "DPD_PRIVILEGED_LOCK_HOLDER"

var privilegedLock struct {
	once sync.Once
	err  error
	// f holds the lock: an *os.File nothing references is closed by its
	// finalizer at the next garbage collection, which releases the flock
	// while the binary still runs.
	f *os.File
}

// lockPrivileged takes the machine-wide lock on first use and holds it until
// the test binary exits; the kernel releases a flock with its holder. The
// new holder first removes what killed holders left (removeLeftovers).
func lockPrivileged(t testing.TB) {
	t.Helper()
	privilegedLock.once.Do(func() {
		if underHolder() {
			return
		}
		f, err := os.OpenFile(privilegedLockPath, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			privilegedLock.err = err
			return
		}
		privilegedLock.err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		privilegedLock.f = f // kept open (and reachable) until exit
		if privilegedLock.err == nil {
			privilegedLock.err = os.Setenv(lockHolderEnv, strconv.Itoa(os.Getpid()))
		}
		if privilegedLock.err == nil {
			if err := removeLeftovers(); err != nil {
				privilegedLock.err = fmt.Errorf("%w (remove them by hand: kill the dpd processes whose --bpf-pin-dir is a "+
					"/sys/fs/bpf/dpd-e2e-*, dpd-linux-* or dpdtest-* directory, `ip netns del` the dpdt*/dpdn* namespaces, "+
					"rm -r those directories)", err)
			}
		}
	})
	if privilegedLock.err != nil {
		t.Fatalf("privileged test lock %s: %v", privilegedLockPath, privilegedLock.err)
	}
}

// underHolder reports whether the process lockHolderEnv names is an
// ancestor of this one (a stale or inherited-by-accident value is not).
func underHolder() bool {
	holder, err := strconv.Atoi(os.Getenv(lockHolderEnv))
	if err != nil || holder <= 1 {
		return false
	}
	for pid := os.Getppid(); pid > 1; {
		if pid == holder {
			return true
		}
		next, ok := parentOf(pid)
		if !ok {
			return false
		}
		pid = next
	}
	return false
}

// parentOf reads pid's parent from /proc.
func parentOf(pid int) (int, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PPid:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			return n, err == nil
		}
	}
	return 0, false
}
