package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLeftoverNames: every name pattern the privileged tests create is a
// leftover once its binary is gone; the names of a real dpd, the demo and
// the bench driver never are.
func TestLeftoverNames(t *testing.T) {
	for _, c := range []struct {
		re       string
		name     string
		leftover bool
	}{
		{"netns", "dpdt29824-3", true},
		{"netns", "dpdn29824hep6c", true},
		{"netns", "dpdn29824hep6cht6", true},
		{"netns", "dpdnlm629824-4", true},
		{"netns", "dpdnlrpf29824-1w", true},
		{"netns", "dpdpark29824-false", true},
		{"netns", "dpdlx29824p", true},
		{"netns", "dpd-e2e-privbpf-29824", true},
		{"netns", "dpd-demo-frontend", false},
		{"netns", "dpdbench-29824", false},
		{"netns", "prod", false},
		{"pins", "dpd-e2e-29824-1", true},
		{"pins", "dpd-e2e-29824-dpdn29824hep", true},
		{"pins", "dpd-e2e-surv-29824-2", true},
		{"pins", "dpd-e2e-prevrs-29824", true},
		{"pins", "dpd-linux-test-29824-7", true},
		{"pins", "dpd-linux-rt6-29824", true},
		{"pins", "dpdtest-29824-12", true},
		{"pins", "dpd-trace-test-29824", true},
		{"pins", "dpd-polprog-pin-29824", true},
		{"pins", "dpd", false},
		{"pins", "dpd-demo-4242", false},
		{"pins", "dpdbench-29824", false},
		{"pins", "dpd-node2", false},
		{"pins", "dpd-linux-node-1", false},
		{"pins", "dpd-e2e-1-1", false},
		{"netns", "dpdt1-1", false},
		{"pins", "calico", false},
	} {
		re := leftoverNetns
		if c.re == "pins" {
			re = leftoverPins
		}
		if got := re.MatchString(c.name); got != c.leftover {
			t.Errorf("%s %q: leftover %v, want %v", c.re, c.name, got, c.leftover)
		}
	}
}

// TestTestPinDirArg: a daemon counts as a test's only by a test pin
// directory under /sys/fs/bpf, in either flag form.
func TestTestPinDirArg(t *testing.T) {
	argv := func(s string) [][]byte { return bytes.Split([]byte(s), []byte(" ")) }
	for s, want := range map[string]bool{
		"dpd --dataplane=linux --bpf-pin-dir /sys/fs/bpf/dpd-e2e-4242-1":                     true,
		"dpd --bpf-pin-dir=/sys/fs/bpf/dpd-e2e-surv-4242-2":                                  true,
		"nsenter --net=/var/run/netns/x dpd -bpf-pin-dir /sys/fs/bpf/dpd-e2e-4242-dpdn4242a": true,
		"dpd --bpf-pin-dir /sys/fs/bpf/dpd":                                                  false,
		"dpd --bpf-pin-dir /tmp/dpd-e2e-4242-1":                                              false,
		"dpd --bpf-pin-dir":                                                                  false,
		"vim /sys/fs/bpf/dpd-e2e-4242-1":                                                     false,
	} {
		if _, got := testPinDirArg(argv(s)); got != want {
			t.Errorf("%q: test daemon %v, want %v", s, got, want)
		}
	}
}

// TestLivePidsNamed: a name holding a running test binary's pid, in full
// or shortened as the tests shorten it, is not a leftover.
func TestLivePidsNamed(t *testing.T) {
	live := livePids{"123456", "23456"}
	for name, want := range map[string]bool{
		"dpd-e2e-123456-1": true, "dpdt23456-2": true, "dpdnlm623456-1": true, "dpd-e2e-777777-1": false,
	} {
		if got := live.named(name); got != want {
			t.Errorf("%s: live %v, want %v", name, got, want)
		}
	}
	if self := strconv.Itoa(os.Getpid()); liveTestPids().named("dpd-e2e-" + self + "-1") {
		t.Error("this binary counts itself as another live test binary")
	}
}

// TestRemoveLeftovers: a namespace with a process in it, a pin directory
// and a daemon-like process whose test binary is gone are all removed;
// the demo's namespace beside them is kept.
func TestRemoveLeftovers(t *testing.T) {
	RequirePrivileged(t) // takes the lock, so a sweep has already run
	// The names of a test binary that is gone (no pid has 7 digits here).
	const dead = 9876543
	ns, keep := fmt.Sprintf("dpdt%d-1", dead%100000), "dpd-demo-leftovertest"
	pin := filepath.Join(bpffsRoot, fmt.Sprintf("dpd-e2e-%d-1", dead))
	if live := liveTestPids(); live.named(ns) || live.named(pin) {
		t.Fatalf("a running test binary (%v) has a pid the stand-in names hold", live)
	}
	for _, n := range []string{ns, keep} {
		_ = exec.Command("ip", "netns", "del", n).Run() // a killed run's, outside the sweep
		Run(t, "ip", "netns", "add", n)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n).Run() })
	}
	t.Cleanup(func() { _ = os.RemoveAll(pin) })
	if err := os.MkdirAll(filepath.Join(pin, "links"), 0o700); err != nil {
		t.Fatal(err)
	}
	// The sleep in the namespace would keep it, and its veths, alive
	// after `ip netns del`; the stand-in daemon is a shell blocked in a
	// builtin read whose arguments name the pin directory.
	inNS := exec.Command("ip", "netns", "exec", ns, "sleep", "600")
	daemon := exec.Command("bash", "-c", "read -r _", "dpd", "--bpf-pin-dir", pin)
	block, err := daemon.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = block.Close() })
	for _, c := range []*exec.Cmd{inNS, daemon} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = c.Wait(); close(exited) }() // reaps it once killed
		t.Cleanup(func() { _ = c.Process.Kill(); <-exited })
	}
	WaitFor(t, 10*time.Second, "the stand-in daemon to run with its pin directory", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", daemon.Process.Pid))
		return strings.Contains(string(b), pin)
	})
	WaitFor(t, 10*time.Second, "the sleep to run in "+ns, func() bool {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		return strings.TrimSpace(string(out)) != ""
	})
	if err := removeLeftovers(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*exec.Cmd{inNS, daemon} {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid)); err == nil && !zombie(b) {
			t.Errorf("%v still runs", c.Args)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); !os.IsNotExist(err) {
		t.Errorf("namespace %s: %v, want removed", ns, err)
	}
	if _, err := os.Stat(pin); !os.IsNotExist(err) {
		t.Errorf("pin directory %s: %v, want removed", pin, err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", keep)); err != nil {
		t.Errorf("the demo's namespace %s was removed: %v", keep, err)
	}
}
