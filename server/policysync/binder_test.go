package policysync

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/internal/ratelog"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// newTestBinder serves a fresh policy-sync directory; the directory is
// short so socket paths stay under the kernel's limit.
func newTestBinder(t *testing.T, opts BinderOptions) *Binder {
	t.Helper()
	dir, err := os.MkdirTemp("", "ps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	opts.Dir = dir
	if opts.Processor == nil {
		opts.Processor = NewProcessor(Options{})
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	b, err := NewBinder(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.closeAll(); b.close() })
	return b
}

func writeCreds(t *testing.T, b *Binder, uid string) {
	t.Helper()
	body := fmt.Sprintf(`{"uid":%q,"workload":"w-%s","namespace":"ns"}`, uid, uid)
	if err := os.WriteFile(filepath.Join(b.opts.Dir, CredsSubdir, uid+CredsExt), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func removeCreds(t *testing.T, b *Binder, uid string) {
	t.Helper()
	if err := os.Remove(filepath.Join(b.opts.Dir, CredsSubdir, uid+CredsExt)); err != nil {
		t.Fatal(err)
	}
}

func countReasons(m map[string]string, reason string) int {
	n := 0
	for _, r := range m {
		if r == reason {
			n++
		}
	}
	return n
}

func TestBinderCapsWorkloadsAndRecovers(t *testing.T) {
	b := newTestBinder(t, BinderOptions{MaxWorkloads: 3})
	for i := range 5 {
		writeCreds(t, b, fmt.Sprintf("u%d", i))
	}
	b.Scan()
	if got := len(b.Sockets()); got != 3 {
		t.Fatalf("%d sockets served, want the cap 3", got)
	}
	if got := countReasons(b.Refused(), reasonLimit); got != 2 {
		t.Fatalf("refused %v, want 2 over the limit", b.Refused())
	}
	// The same files win each scan: the lowest uids.
	for _, uid := range []string{"u0", "u1", "u2"} {
		if _, ok := b.Sockets()[uid]; !ok {
			t.Fatalf("%s not served: %v", uid, b.Sockets())
		}
	}
	removeCreds(t, b, "u0")
	removeCreds(t, b, "u1")
	b.Scan()
	socks := b.Sockets()
	if len(socks) != 3 || socks["u3"] == "" || socks["u4"] == "" || len(b.Refused()) != 0 {
		t.Fatalf("after removals: served %v refused %v", socks, b.Refused())
	}
	if _, err := os.Stat(filepath.Join(b.opts.Dir, MountSubdir, "u0")); !os.IsNotExist(err) {
		t.Fatalf("mount/u0 left behind: %v", err)
	}
}

func TestBinderKeepsDescriptorReserve(t *testing.T) {
	b := newTestBinder(t, BinderOptions{ConnsPerWorkload: 1, FDReserve: 10})
	// 100 descriptors open, limit 100+10+4: room for two workloads of two
	// descriptors each (listener + one connection).
	open := 100
	b.budget.openFDs = func() int { return open + len(b.Sockets()) }
	b.budget.limit = func() int { return 100 + 10 + 4 }
	for i := range 5 {
		writeCreds(t, b, fmt.Sprintf("u%d", i))
	}
	b.Scan()
	if got := len(b.Sockets()); got != 2 {
		t.Fatalf("%d served, want 2 within the reserve", got)
	}
	if got := countReasons(b.Refused(), reasonDescriptors); got != 3 {
		t.Fatalf("refused %v, want 3 for descriptors", b.Refused())
	}
	// Out of descriptors entirely (cannot list /proc/self/fd): nothing new.
	b.budget.openFDs = func() int { return -1 }
	removeCreds(t, b, "u0")
	b.Scan()
	if got := len(b.Sockets()); got != 1 {
		t.Fatalf("%d served after a removal with no descriptors, want 1", got)
	}
	// Descriptors back: the refused files are served.
	open = 0
	b.budget.openFDs = func() int { return open + len(b.Sockets()) }
	b.budget.limit = func() int { return 1000 }
	b.Scan()
	if got := len(b.Sockets()); got != 4 || len(b.Refused()) != 0 {
		t.Fatalf("served %d refused %v after descriptors came back", got, b.Refused())
	}
}

func TestLimitListenerBoundsConnections(t *testing.T) {
	dir := t.TempDir()
	raw, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	budget := newFDBudget(2, 0)
	l := newLimitListener(raw, 2, budget)
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("unix", filepath.Join(dir, "s"))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	first, second := <-accepted, <-accepted
	testutil.WaitFor(t, 5*time.Second, "two connections counted", func() bool { return budget.conns.Load() == 2 })
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted while two were open")
	default:
	}
	first.Close()
	third := <-accepted
	if budget.conns.Load() != 2 {
		t.Fatalf("conns %d", budget.conns.Load())
	}
	second.Close()
	third.Close()
	for _, c := range clients {
		c.Close()
	}
	if err := l.Close(); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Fatal(err)
	}
	for range accepted { // the accept loop ends
	}
	if budget.conns.Load() != 0 {
		t.Fatalf("conns %d after closing", budget.conns.Load())
	}
}

// snapshot records every path under dir with its mode, size and content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
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
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameSnapshot(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if len(before) != len(after) {
		t.Fatalf("%s changed: before %v after %v", what, before, after)
	}
	for p, v := range before {
		if after[p] != v {
			t.Fatalf("%s: %s was %q, now %q", what, p, v, after[p])
		}
	}
}

func TestBinderFollowsNoLinks(t *testing.T) {
	var logs syncBuf
	b := newTestBinder(t, BinderOptions{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	sentinel := t.TempDir()
	if err := os.WriteFile(filepath.Join(sentinel, SocketFilename), []byte("root-owned"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sentinel, "secret"), []byte(`Top secret`), 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, sentinel)
	// mount/evil -> the sentinel: its "socket" must not be replaced.
	writeCreds(t, b, "evil")
	if err := os.Symlink(sentinel, filepath.Join(b.opts.Dir, MountSubdir, "evil")); err != nil {
		t.Fatal(err)
	}
	// creds/leak.json -> a file outside: not read.
	if err := os.Symlink(filepath.Join(sentinel, "secret"), filepath.Join(b.opts.Dir, CredsSubdir, "leak"+CredsExt)); err != nil {
		t.Fatal(err)
	}
	// A hard link to a file outside (same filesystem): not read either.
	if err := os.Link(filepath.Join(sentinel, "secret"), filepath.Join(b.opts.Dir, CredsSubdir, "hard"+CredsExt)); err != nil {
		t.Logf("no hard link across filesystems: %v", err)
	}
	b.Scan()
	sameSnapshot(t, "the directory outside", before, snapshot(t, sentinel))
	refused := b.Refused()
	if refused["evil"] != reasonLink || refused["leak"] != reasonLink || len(b.Sockets()) != 0 {
		t.Fatalf("served %v refused %v", b.Sockets(), refused)
	}
	if _, ok := refused["hard"]; !ok && len(b.Sockets()) != 0 {
		t.Fatalf("hard link served")
	}
	if out := logs.String(); strings.Contains(out, "Top") || strings.Contains(out, "'T'") {
		t.Fatalf("file content in the log:\n%s", out)
	}
	// A link swapped in for creds/ itself is not followed either: the
	// workloads served are closed, nothing outside is read.
	writeCreds(t, b, "ok")
	b.Scan()
	if len(b.Sockets()) != 1 {
		t.Fatalf("ok not served: %v %v", b.Sockets(), b.Refused())
	}
	credsDir := filepath.Join(b.opts.Dir, CredsSubdir)
	if err := os.Rename(credsDir, credsDir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(credsDir+".old", credsDir); err != nil {
		t.Fatal(err)
	}
	b.Scan()
	if len(b.Sockets()) != 1 {
		// The old directory is still the one held: still listed.
		t.Fatalf("sockets %v after creds/ became a link", b.Sockets())
	}
	sameSnapshot(t, "the directory outside", before, snapshot(t, sentinel))
}

func TestBinderSocketPlacement(t *testing.T) {
	old := unix.Umask(0o077) // the mode must not depend on dpd's umask
	t.Cleanup(func() { unix.Umask(old) })
	b := newTestBinder(t, BinderOptions{})
	// A uid long enough that the socket path passes the kernel's 108 bytes.
	long := strings.Repeat("u", 200)
	writeCreds(t, b, long)
	// A regular file where the socket goes is not replaced.
	if err := os.MkdirAll(filepath.Join(b.opts.Dir, MountSubdir, "busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.opts.Dir, MountSubdir, "busy", SocketFilename), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeCreds(t, b, "busy")
	b.Scan()
	sock := b.Sockets()[long]
	if sock == "" {
		t.Fatalf("long uid not served: %v", b.Refused())
	}
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != SocketMode {
		t.Fatalf("socket %v mode %v, want a socket with %o", err, fi.Mode(), SocketMode)
	}
	if b.Refused()["busy"] != reasonListen {
		t.Fatalf("busy: %v", b.Refused())
	}
	if got, err := os.ReadFile(filepath.Join(b.opts.Dir, MountSubdir, "busy", SocketFilename)); err != nil || string(got) != "mine" {
		t.Fatalf("the file in the socket's place: %q %v", got, err)
	}
	removeCreds(t, b, long)
	b.Scan()
	if _, err := os.Lstat(filepath.Join(b.opts.Dir, MountSubdir, long)); !os.IsNotExist(err) {
		t.Fatalf("mount/<long uid> left behind: %v", err)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestBinderReadsARefusedFileOnlyWhenItChanges(t *testing.T) {
	met, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	b := newTestBinder(t, BinderOptions{Metrics: met, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	path := filepath.Join(b.opts.Dir, CredsSubdir, "u"+CredsExt)
	if err := os.WriteFile(path, []byte(`{"workload":`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A big file is refused from its size, unread.
	big := make([]byte, 4<<20)
	if err := os.WriteFile(filepath.Join(b.opts.Dir, CredsSubdir, "big"+CredsExt), big, 0o644); err != nil {
		t.Fatal(err)
	}
	// Many bad files log a bounded number of lines.
	for i := range 300 {
		if err := os.WriteFile(filepath.Join(b.opts.Dir, CredsSubdir, fmt.Sprintf("bad%d", i)+CredsExt), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 {
		b.Scan()
	}
	reads := func() float64 { return promtest.ToFloat64(met.refusals.WithLabelValues(reasonInvalid)) }
	if got := reads(); got != 302 {
		t.Fatalf("%v invalid refusals over 50 scans of 302 bad files, want each read once", got)
	}
	if got := promtest.ToFloat64(met.refused.WithLabelValues(reasonInvalid)); got != 302 {
		t.Fatalf("refused gauge %v", got)
	}
	if _, err := readCredentialsAt(int(b.creds.Fd()), "big"); err == nil || !strings.Contains(err.Error(), "refused unread") {
		t.Fatalf("big file: %v, want refused by its size", err)
	}
	if n := strings.Count(logs.String(), "not served"); n > ratelog.DefaultBurst {
		t.Fatalf("%d warning lines for 302 bad files, want at most %d per interval", n, ratelog.DefaultBurst)
	}
	// Fixed in place: read again and served.
	if err := os.WriteFile(path, []byte(`{"workload":"w","namespace":"n"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	b.Scan()
	if b.Sockets()["u"] == "" {
		t.Fatalf("fixed file not served: %v", b.Refused()["u"])
	}
	if got := promtest.ToFloat64(met.refused.WithLabelValues(reasonInvalid)); got != 301 {
		t.Fatalf("refused gauge %v after the fix", got)
	}
}

func TestBinderWakesOnInotify(t *testing.T) {
	// Polling and resync are off for the test's length: only an event
	// can make the binder see the file.
	b := newTestBinder(t, BinderOptions{PollInterval: time.Hour, ResyncInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	testutil.WaitFor(t, 5*time.Second, "the watcher", func() bool { return b.watching() })
	writeCreds(t, b, "u")
	testutil.WaitFor(t, 5*time.Second, "socket for u", func() bool { return len(b.Sockets()) == 1 })
	removeCreds(t, b, "u")
	testutil.WaitFor(t, 5*time.Second, "socket for u closed", func() bool { return len(b.Sockets()) == 0 })
}

// TestSilentClientDoesNotHoldRemoval: a client that connects and never
// speaks (its HTTP/2 handshake pending) does not delay closing its
// workload: removal closes the connection.
func TestSilentClientDoesNotHoldRemoval(t *testing.T) {
	b := newTestBinder(t, BinderOptions{HandshakeTimeout: time.Hour})
	writeCreds(t, b, "u")
	b.Scan()
	sock := b.Sockets()["u"]
	if sock == "" {
		t.Fatalf("not served: %v", b.Refused())
	}
	for range 4 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	testutil.WaitFor(t, 5*time.Second, "four connections accepted", func() bool { return b.budget.conns.Load() == 4 })
	removeCreds(t, b, "u")
	scanned := make(chan struct{})
	go func() { b.Scan(); close(scanned) }()
	testutil.WaitFor(t, 10*time.Second, "the workload closed despite silent clients", func() bool {
		select {
		case <-scanned:
			return len(b.Sockets()) == 0 && b.budget.conns.Load() == 0
		default:
			return false
		}
	})
}
