package hostile_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// psDaemon is a daemon serving policy sync under its own directory.
func psDaemon(t *testing.T, args ...string) (*daemon, string) {
	t.Helper()
	psDir, err := os.MkdirTemp("", "dpdps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(psDir) })
	d := startDaemon(t, nil, append([]string{"--policysync-dir=" + psDir}, args...)...)
	return d, psDir
}

func writeCreds(t *testing.T, psDir, uid string) {
	t.Helper()
	body := fmt.Sprintf(`{"UID":%q,"Workload":"pod-%s","Namespace":"ns","ServiceAccount":"default"}`, uid, uid)
	if err := os.WriteFile(filepath.Join(psDir, "creds", uid+".json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func removeAllCreds(t *testing.T, psDir string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(psDir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Remove(filepath.Join(psDir, "creds", e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// floodFiles is how many credentials files the flood tests write: well
// past both the cap and the descriptors left under the lowered limit.
const floodFiles = 3000

// TestCredentialFloodHitsTheCap: thousands of credentials files are
// served up to --policysync-max-workloads, the rest refused and counted;
// dpd keeps answering, and serves again once files go.
func TestCredentialFloodHitsTheCap(t *testing.T) {
	d, psDir := psDaemon(t, "--policysync-max-workloads=100")
	for i := range floodFiles {
		writeCreds(t, psDir, fmt.Sprintf("u%05d", i))
	}
	testutil.WaitFor(t, 60*time.Second, "100 served, the rest refused", func() bool {
		return d.metric("dpd_policysync_workloads") == 100 &&
			d.metric("dpd_policysync_workloads_refused", `reason="limit"`) == floodFiles-100
	})
	d.answers(t)
	if n := d.log.count(); n > 200 {
		t.Errorf("%d log lines for %d refused files, bound 200", n, floodFiles-100)
	}
	removeAllCreds(t, psDir)
	testutil.WaitFor(t, 60*time.Second, "every socket closed", func() bool {
		return d.metric("dpd_policysync_workloads") == 0 && d.metric("dpd_policysync_workloads_refused") == 0
	})
	for i := range 10 {
		writeCreds(t, psDir, fmt.Sprintf("again%d", i))
	}
	testutil.WaitFor(t, 30*time.Second, "new files served again", func() bool {
		return d.metric("dpd_policysync_workloads") == 10
	})
	d.answers(t)
	d.checkRSS(t)
}

// nofileLimit is the RLIMIT_NOFILE the descriptor test gives dpd: the
// flood would need ~3000 descriptors.
const nofileLimit = 512

// TestCredentialFloodAtTheDescriptorLimit: with RLIMIT_NOFILE lowered to
// 512, dpd serves only what leaves its reserve free, keeps answering on
// its socket and /metrics (with 50 more connections open at once), and
// recovers on its own when the files are removed.
func TestCredentialFloodAtTheDescriptorLimit(t *testing.T) {
	d, psDir := psDaemon(t)
	lim := unix.Rlimit{Cur: nofileLimit, Max: nofileLimit}
	if err := unix.Prlimit(d.cmd.Process.Pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	for i := range floodFiles {
		writeCreds(t, psDir, fmt.Sprintf("u%05d", i))
	}
	testutil.WaitFor(t, 60*time.Second, "descriptor refusals", func() bool {
		served := d.metric("dpd_policysync_workloads")
		return served > 0 && served+d.metric("dpd_policysync_workloads_refused", `reason="descriptors"`) == floodFiles
	})
	served := d.metric("dpd_policysync_workloads")
	t.Logf("%v workloads served under RLIMIT_NOFILE %d, %d descriptors open", served, nofileLimit, d.openFDs(t))
	// Connect to every served socket, several times over, as clients
	// would: the reserve holds.
	base := d.openFDs(t)
	conns := fillWorkloadSockets(t, psDir, 4)
	testutil.WaitFor(t, 30*time.Second, "dpd to accept every workload connection", func() bool {
		return d.openFDs(t) >= base+conns
	})
	t.Logf("%d workload connections open, dpd holds %d descriptors", conns, d.openFDs(t))
	if fds := d.openFDs(t); fds > nofileLimit-200 {
		t.Errorf("dpd holds %d descriptors: less than 200 of %d left", fds, nofileLimit)
	}
	var extra []func()
	for range 50 {
		extra = append(extra, holdConnection(t, d.socket))
	}
	d.answers(t)
	for _, c := range extra {
		c()
	}
	removeAllCreds(t, psDir)
	testutil.WaitFor(t, 60*time.Second, "every socket closed", func() bool {
		return d.metric("dpd_policysync_workloads") == 0 && d.metric("dpd_policysync_workloads_refused") == 0
	})
	for i := range 10 {
		writeCreds(t, psDir, fmt.Sprintf("again%d", i))
	}
	testutil.WaitFor(t, 30*time.Second, "new files served again", func() bool {
		return d.metric("dpd_policysync_workloads") == 10
	})
	d.answers(t)
	d.checkRSS(t)
}

// TestLinksDoNotEscape: a symlinked mount/<uid>, symlinked credentials
// files (to a file and to a FIFO) and a hard link change nothing outside
// the policy-sync directory, leak no content into the log, and are
// refused and counted; a socket path over 108 bytes is served and cleaned.
func TestLinksDoNotEscape(t *testing.T) {
	d, psDir := psDaemon(t)
	sentinel := t.TempDir()
	const secret = "Qsecret: root password"
	must(t, os.WriteFile(filepath.Join(sentinel, "socket"), []byte("root-owned"), 0o600))
	must(t, os.WriteFile(filepath.Join(sentinel, "secret"), []byte(secret), 0o600))
	must(t, unix.Mkfifo(filepath.Join(sentinel, "fifo"), 0o600))
	before := snapshot(t, sentinel)

	writeCreds(t, psDir, "evil")
	must(t, os.Symlink(sentinel, filepath.Join(psDir, "mount", "evil")))
	must(t, os.Symlink(filepath.Join(sentinel, "secret"), filepath.Join(psDir, "creds", "leak.json")))
	must(t, os.Symlink(filepath.Join(sentinel, "fifo"), filepath.Join(psDir, "creds", "fifo.json")))
	must(t, unix.Mkfifo(filepath.Join(psDir, "creds", "pipe.json"), 0o600))
	must(t, os.Link(filepath.Join(sentinel, "secret"), filepath.Join(psDir, "creds", "hard.json")))
	long := strings.Repeat("l", 200)
	writeCreds(t, psDir, long)
	writeCreds(t, psDir, "good")

	testutil.WaitFor(t, 30*time.Second, "links refused, the rest served", func() bool {
		return d.metric("dpd_policysync_workloads_refused", `reason="link"`) == 3 &&
			d.metric("dpd_policysync_workloads_refused", `reason="invalid"`) == 2 && // the FIFO, the hard link
			d.metric("dpd_policysync_workloads") == 2
	})
	sameSnapshot(t, before, snapshot(t, sentinel))
	for _, leak := range []string{"'Q'", "Qsecret", "root password"} {
		if strings.Contains(d.log.text(), leak) {
			t.Errorf("the log quotes the link's target (%q)", leak)
		}
	}
	sock := filepath.Join(psDir, "mount", long, "socket")
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Fatalf("long socket path: %v %v", fi, err)
	}
	must(t, os.Remove(filepath.Join(psDir, "creds", long+".json")))
	testutil.WaitFor(t, 30*time.Second, "the long path cleaned up", func() bool {
		_, err := os.Lstat(filepath.Join(psDir, "mount", long))
		return os.IsNotExist(err)
	})
	d.answers(t)
	sameSnapshot(t, before, snapshot(t, sentinel))
	d.checkRSS(t)
}

// bigFile is the unparsable credentials file's size.
const bigFile = 100 << 20

// cpuWindow is how long the big-file test watches dpd's CPU time, and
// cpuBound the most it may use in it: 5% of one core.
const (
	cpuWindow = 3 * time.Second
	cpuBound  = 0.05
)

// TestBigUnparsableCredentials: a 100 MiB credentials file is refused
// unread; dpd then spends under 5% of a core and stays under the memory
// bound while the file sits there.
func TestBigUnparsableCredentials(t *testing.T) {
	d, psDir := psDaemon(t)
	// Written beside creds/ and renamed in, so that dpd sees the file once,
	// whole: a file it saw grow would rightly be read again.
	tmp := filepath.Join(psDir, "big.json")
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = '['
	}
	for range bigFile / len(buf) {
		if _, err := f.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	must(t, f.Close())
	must(t, os.Rename(tmp, filepath.Join(psDir, "creds", "big.json")))
	testutil.WaitFor(t, 30*time.Second, "the big file refused", func() bool {
		return d.metric("dpd_policysync_workloads_refused", `reason="invalid"`) == 1
	})
	refusals := d.metric("dpd_policysync_refused_total", `reason="invalid"`)
	ticksPerSec := 100.0 // USER_HZ on Linux
	start := d.cpuTicks(t)
	time.Sleep(cpuWindow) // the measurement window, not a wait for a condition
	used := float64(d.cpuTicks(t)-start) / ticksPerSec / cpuWindow.Seconds()
	d.answers(t)
	t.Logf("dpd used %.1f%% of a core over %s with a 100 MiB unparsable credentials file (bound %.0f%%)", used*100, cpuWindow, cpuBound*100)
	if used > cpuBound {
		t.Errorf("CPU %.1f%% of a core, bound %.0f%%", used*100, cpuBound*100)
	}
	if got := d.metric("dpd_policysync_refused_total", `reason="invalid"`); got != refusals {
		t.Errorf("the unchanged file was refused again (%v -> %v): it was re-read", refusals, got)
	}
	d.checkRSS(t)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot records every path under dir with its mode and content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	must(t, filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[p] = v
		return nil
	}))
	return out
}

func sameSnapshot(t *testing.T, before, after map[string]string) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("the directory outside changed:\nbefore %v\nafter  %v", before, after)
	}
	for p, v := range before {
		if after[p] != v {
			t.Fatalf("outside the policy-sync directory %s was %q, now %q", p, v, after[p])
		}
	}
}
