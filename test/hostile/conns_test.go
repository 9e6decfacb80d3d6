package hostile_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// fillWorkloadSockets opens per connections to every served workload
// socket under psDir (closed at cleanup) and reports how many it opened.
func fillWorkloadSockets(t *testing.T, psDir string, per int) int {
	t.Helper()
	socks, err := filepath.Glob(filepath.Join(psDir, "mount", "*", "socket"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range socks {
		for range per {
			c, err := net.Dial("unix", s)
			if err != nil {
				if os.IsNotExist(err) {
					break
				}
				t.Fatalf("dial %s: %v", s, err)
			}
			t.Cleanup(func() { _ = c.Close() })
			n++
		}
	}
	return n
}

// holdConnection connects to dpd's main socket; the func closes it.
func holdConnection(t *testing.T, socket string) func() {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	return func() { _ = c.Close() }
}
