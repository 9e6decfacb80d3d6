package server

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenUnix(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string) // nil: not even the parent dir exists
		wantErr string
	}{
		{name: "fresh, parent created"},
		{name: "stale socket replaced", prepare: func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			l.Close()
		}},
		{name: "live socket kept", wantErr: "in use", prepare: func(t *testing.T, path string) {
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
		}},
		{name: "regular file kept", wantErr: "not a socket", prepare: func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "dpd")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			path := filepath.Join(dir, "run", "dpd.sock")
			if tt.prepare != nil {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				tt.prepare(t, path)
			}

			lis, err := ListenUnix(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ListenUnix = %v, want error containing %q", err, tt.wantErr)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("the existing file was removed: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
				t.Errorf("mode = %v, want socket 0600", fi.Mode())
			}
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatalf("dial the new socket: %v", err)
			}
			c.Close()
		})
	}
}
