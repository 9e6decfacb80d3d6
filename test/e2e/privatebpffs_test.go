package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// privateRefusalTimeout bounds a dpd that must refuse to start: it exits
// before it touches the kernel, in well under a second.
const privateRefusalTimeout = 30 * time.Second

// TestPrivateBPFFSRefused: a dpd started in a mount namespace of its own
// without the host's bpffs (under 'ip netns exec', or 'unshare -m' with a
// fresh bpffs) beside the pinned state of a stopped dpd refuses to start,
// naming the fix, and touches nothing: the pinned programs go on enforcing
// the policy for new connections and established ones alike. A mount
// namespace of its own that has the host's bpffs (a container with
// /sys/fs/bpf mounted in) is fine: that dpd starts and adopts the state.
func TestPrivateBPFFSRefused(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, b, c := NewWorkload(t, 1), NewWorkload(t, 2), NewWorkload(t, 3)
	b.Serve(t, []int{tcpPort}, nil)
	enforced := func(t *testing.T) {
		t.Helper()
		Expect(t, Allowed(TCP(a, b.IP, tcpPort)), Allowed(Ping(a, b.IP)),
			Denied(TCP(c, b.IP, tcpPort)), Denied(Ping(a, c.IP)))
	}
	n := newNode(t)
	n.start()
	ctl := n.connectUp(t, messages(t, survivalScenario(a, b, c)), a, b, c)
	enforced(t)
	before := settledFingerprint(t, n.pin, a, b, c)
	pinsBefore := pinTree(t, n.pin)

	tr := startTraffic(t, a, b, 600, 9300)
	n.stop() // the restart gap: the pinned programs enforce alone

	netns := fmt.Sprintf("dpd-e2e-privbpf-%d", os.Getpid())
	testutil.Run(t, "ip", "netns", "add", netns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", netns).Run() })
	for _, tc := range []struct {
		name string
		wrap []string
	}{
		{"ip-netns-exec", []string{"ip", "netns", "exec", netns}},
		{"unshare-fresh-bpffs", []string{"unshare", "--mount", "--propagation", "private",
			"sh", "-c", `mount -t bpf bpf /sys/fs/bpf && exec "$@"`, "sh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runRefused(t, n, tc.wrap)
			for _, want := range []string{"private bpffs", "nsenter --net=", "Bidirectional", "--allow-private-bpffs"} {
				if !strings.Contains(out, want) {
					t.Errorf("the refusal does not say %q:\n%s", want, out)
				}
			}
			tr.waitRounds(t, 20) // the established connection flows on
			enforced(t)          // and new ones are decided as before
			if diff := diffFingerprints(before, fingerprint(t, n.pin, a, b, c), true); len(diff) > 0 {
				t.Errorf("the refused dpd changed the kernel state: %v", diff)
			}
			if after := pinTree(t, n.pin); strings.Join(after, " ") != strings.Join(pinsBefore, " ") {
				t.Errorf("the refused dpd changed the pins:\nbefore %v\nafter  %v", pinsBefore, after)
			}
		})
	}

	// unshare -m alone keeps a copy of the host's mounts: the same bpffs.
	d := n.startWrapped([]string{"unshare", "--mount", "--propagation", "private"})
	ctl.waitStreams(t, 2)
	requireZeroWrites(t, n, d)
	line := logLine(d.Log(), `msg=bpffs`)
	if !strings.Contains(line, "found=host-bpffs") {
		t.Errorf("a dpd in a mount namespace of its own with the host's bpffs logged %q, want found=host-bpffs", line)
	}
	t.Logf("the adopting dpd in unshare -m: %s", line)
	enforced(t)
	tr.requireNoLoss(t, "refused private starts, then an adopting one")
	if diff := diffFingerprints(before, fingerprint(t, n.pin, a, b, c), true); len(diff) > 0 {
		t.Errorf("the adopting dpd changed the kernel state: %v", diff)
	}
}

// runRefused runs dpd on n's pin directory and socket through wrap and
// returns its output; it must exit with code 1 on its own.
func runRefused(t *testing.T, n *node, wrap []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), privateRefusalTimeout)
	defer cancel()
	args := []string{"--dataplane=linux", "--socket", n.socket, "--metrics-addr", "127.0.0.1:0",
		"--bpf-pin-dir", n.pin, "--log-level", "debug"}
	argv := append(append(append([]string(nil), wrap...), dpdBinary), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("%s: exited with %v, want exit code 1 (a refusal)\n%s", strings.Join(argv, " "), err, out)
	}
	t.Logf("%s refused: %s", strings.Join(wrap, " "), lastLine(string(out)))
	return string(out)
}

// pinTree lists the files under a pin directory, relative to it.
func pinTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatalf("list pins: %v", err)
	}
	sort.Strings(out)
	return out
}

// logLine returns the first line of log containing s, or "".
func logLine(log, s string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
