package nl

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func TestIPv6State(t *testing.T) {
	tests := []struct {
		name   string
		value  string // "" = no net/ipv6 tree
		wantOn bool
	}{
		{"enabled", "0\n", true},
		{"disabled by sysctl", "1\n", false},
		{"kernel without ipv6", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.value != "" {
				dir := filepath.Join(root, "net/ipv6/conf/all")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "disable_ipv6"), []byte(tc.value), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c := &Configurer{procSys: root, log: slog.New(slog.DiscardHandler)}
			on, reason, err := c.IPv6State()
			if err != nil {
				t.Fatal(err)
			}
			if on != tc.wantOn || (!on && reason == "") {
				t.Fatalf("on %v (reason %q), want %v with a reason when off", on, reason, tc.wantOn)
			}
		})
	}
	// Unreadable is an error, never a silent "on".
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net/ipv6/conf/all/disable_ipv6"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Configurer{procSys: root, log: slog.New(slog.DiscardHandler)}
	if on, _, err := c.IPv6State(); err == nil || on {
		t.Fatalf("a directory as the sysctl: on %v err %v, want an error and off", on, err)
	}
}
