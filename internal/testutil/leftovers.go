package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A test binary killed before its cleanups ran (a CI job cancelled, a
// session cut off) leaves its namespaces, its pinned programs and links,
// and the dpd daemons it started, which outlive it. They hold routes and
// attached programs for the suite's addresses, so the next run on the host
// fails as if another dataplane were there. Whoever takes the privileged
// lock removes them first: while it is held no other privileged binary
// creates anything (only its own children, which never sweep), so every
// resource named as only tests name theirs is a leftover.
var (
	// leftoverNetns matches the namespaces privileged tests create, all
	// named with their binary's pid: dpdt<pid>-<n> (workloads), dpdn<pid>
	// <node> (e2e nodes), dpdnl<kind><pid>-<n>[w] (netlink), dpdpark<pid>-
	// <bool>, dpdlx<pid>[p] (linux), dpd-e2e-privbpf-<pid>.
	leftoverNetns = regexp.MustCompile(`^(dpdt\d{3,}-\d+|dpdn\d{3,}[a-z0-9]*|dpdnl[a-z0-9]*\d{3,}-\d+w?|dpdpark\d{3,}-(true|false)|dpdlx\d{3,}p?|dpd-e2e-privbpf-\d{3,})$`)
	// leftoverPins matches their pin directories under /sys/fs/bpf:
	// dpd-e2e-[surv-|prevrs-]<pid>-…, dpd-linux-<kind>-<pid>[-n],
	// dpdtest-<pid>-<n>, dpd-trace-test-<pid>, dpd-polprog-pin-<pid>.
	// Never dpd (the default), dpd-demo-* or dpdbench-* (which sweep
	// their own). A pid has three digits or more, so names an operator
	// might choose (dpd-linux-node-1) do not match.
	leftoverPins = regexp.MustCompile(`^(dpd-e2e-([a-z]+-)?\d{3,}(-.+)?|dpd-linux-[a-z0-9]+-\d{3,}(-\d+)?|dpdtest-\d{3,}-\d+|dpd-trace-test-\d{3,}|dpd-polprog-pin-\d{3,})$`)
)

// bpffsRoot is where the tests pin.
const bpffsRoot = "/sys/fs/bpf"

// removeLeftovers removes what killed test binaries left, reporting each
// removal on stderr. It runs under the privileged lock, before the first
// privileged test of the binary creates anything.
func removeLeftovers() error {
	live := liveTestPids()
	stale := func(name string) bool { return !live.named(name) }
	var errs []error
	for _, p := range orphanDaemons(stale) {
		if err := killAndWait(p); err != nil {
			errs = append(errs, err)
		} else {
			report("dpd daemon pid %d", p)
		}
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if !leftoverNetns.MatchString(e.Name()) || !stale(e.Name()) {
				continue
			}
			if err := removeNetns(e.Name()); err != nil {
				errs = append(errs, err)
			} else {
				report("network namespace %s", e.Name())
			}
		}
	}
	if ents, err := os.ReadDir(bpffsRoot); err == nil {
		for _, e := range ents {
			if !e.IsDir() || !leftoverPins.MatchString(e.Name()) || !stale(e.Name()) {
				continue
			}
			// Unpinning the TCX links detaches their programs; legacy tc
			// filters go with their interfaces: the workloads' host sides
			// go with the namespaces that hold their peers. (Veth pairs a
			// package test makes wholly in the root namespace carry its
			// pid and are not swept.)
			if err := os.RemoveAll(filepath.Join(bpffsRoot, e.Name())); err != nil {
				errs = append(errs, fmt.Errorf("remove leftover pins: %w", err))
			} else {
				report("pin directory %s", filepath.Join(bpffsRoot, e.Name()))
			}
		}
	}
	return errors.Join(errs...)
}

func report(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "testutil: removed the leftover %s of a test run that did not finish\n", fmt.Sprintf(format, args...))
}

// livePids are the pids of the test binaries (*.test) that run now, other
// than this one, each also as the shortened forms tests put in names.
type livePids []string

// liveTestPids lists the test binaries that run now. A binary the holder
// started runs under its lock (underHolder) and may outlive a killed
// holder: its resources are not leftovers while it runs.
func liveTestPids() livePids {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out livePids
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || !strings.HasSuffix(strings.TrimSuffix(exe, " (deleted)"), ".test") {
			continue
		}
		out = append(out, strconv.Itoa(pid), strconv.Itoa(pid%100000))
	}
	return out
}

// named reports whether name holds the pid of a live test binary.
func (l livePids) named(name string) bool {
	for _, p := range l {
		if strings.Contains(name, p) {
			return true
		}
	}
	return false
}

// orphanDaemons are the processes, other than this one, whose
// --bpf-pin-dir is a stale test pin directory: dpd daemons a killed test
// binary started.
func orphanDaemons(stale func(string) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if dir, ok := testPinDirArg(bytes.Split(cmdline, []byte{0})); ok && err == nil && stale(filepath.Base(dir)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// testPinDirArg returns the test pin directory argv passes as
// --bpf-pin-dir (either "--bpf-pin-dir X" or "--bpf-pin-dir=X"), if any.
func testPinDirArg(argv [][]byte) (string, bool) {
	for i, a := range argv {
		arg, ok := strings.CutPrefix(string(a), "-")
		if !ok {
			continue
		}
		arg = strings.TrimPrefix(arg, "-") // Go flags take one dash or two
		var dir string
		switch {
		case arg == "bpf-pin-dir" && i+1 < len(argv):
			dir = string(argv[i+1])
		case strings.HasPrefix(arg, "bpf-pin-dir="):
			dir = strings.TrimPrefix(arg, "bpf-pin-dir=")
		default:
			continue
		}
		if filepath.Dir(dir) == bpffsRoot && leftoverPins.MatchString(filepath.Base(dir)) {
			return dir, true
		}
	}
	return "", false
}

// killAndWait kills pid and waits until it is gone (reaped by its new
// parent), so that its pins and namespaces are free to remove.
func killAndWait(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill leftover dpd %d: %w", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil || zombie(stat) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leftover dpd %d still runs 10s after SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// zombie reads the state field of /proc/<pid>/stat ("pid (comm) S …"). A
// zombie holds no descriptors: its pins and namespaces are free.
func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// removeNetns kills what still runs in the namespace (a namespace lives as
// long as a process is in it, and its veths with it), then deletes it.
func removeNetns(name string) error {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return fmt.Errorf("list processes in leftover namespace %s: %w", name, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			if err := killAndWait(pid); err != nil {
				return err
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("delete leftover namespace %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}
