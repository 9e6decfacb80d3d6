package hostile_test

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// startSoftLimit is the soft RLIMIT_NOFILE the daemon is started with, well
// under any hard limit a test machine runs with.
const startSoftLimit = 256

// TestFileLimitRaised: dpd started with a soft RLIMIT_NOFILE below its hard
// limit raises the soft limit to the hard one, so the descriptors it
// budgets for policy sync are the most the node allows it.
func TestFileLimitRaised(t *testing.T) {
	var lim syscall.Rlimit
	must(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Max <= startSoftLimit {
		t.Fatalf("hard RLIMIT_NOFILE %d: the test needs one above %d", lim.Max, startSoftLimit)
	}
	// syscall.Setrlimit (not a raw prlimit) so that os/exec hands the
	// child this limit instead of the one the test binary started with.
	low := syscall.Rlimit{Cur: startSoftLimit, Max: lim.Max}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) }) // also if the start fails
	must(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	d := startDaemon(t, nil)
	must(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))

	soft, hard := fileLimits(t, d.cmd.Process.Pid)
	t.Logf("started with soft %d, hard %d: dpd runs with soft %d, hard %d", startSoftLimit, lim.Max, soft, hard)
	if hard != lim.Max || soft != hard {
		t.Fatalf("dpd's RLIMIT_NOFILE is %d/%d, want the soft limit raised to the hard %d", soft, hard, lim.Max)
	}
	d.answers(t)
}

// fileLimits reads a process's soft and hard RLIMIT_NOFILE from /proc.
func fileLimits(t *testing.T, pid int) (soft, hard uint64) {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/limits")
	must(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Max open files")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			t.Fatalf("limits line %q", sc.Text())
		}
		soft, err = strconv.ParseUint(fields[0], 10, 64)
		must(t, err)
		hard, err = strconv.ParseUint(fields[1], 10, 64)
		must(t, err)
		return soft, hard
	}
	t.Fatalf("no open-files line in /proc/%d/limits (%v)", pid, sc.Err())
	return 0, 0
}
