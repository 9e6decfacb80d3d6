package policysync

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	t.Cleanup(func() { b.closeAll(); b.creds.Close() })
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
