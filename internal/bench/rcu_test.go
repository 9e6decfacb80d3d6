package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func rcuFiles(t *testing.T, setting string) (file, marker string) {
	t.Helper()
	dir := t.TempDir()
	file, marker = filepath.Join(dir, "rcu_expedited"), filepath.Join(dir, "run", "marker")
	if err := os.WriteFile(file, []byte(setting+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, marker
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// The switch writes the other setting, keeps the found one in the marker
// while it holds, and puts it back.
func TestSwitchRCU(t *testing.T) {
	for _, found := range []string{"0", "1"} {
		file, marker := rcuFiles(t, found)
		sw, err := switchRCU(file, marker)
		if err != nil {
			t.Fatal(err)
		}
		other := map[string]string{"0": "1", "1": "0"}[found]
		if got := readFile(t, file); got != other || sw.switched() != other {
			t.Errorf("found %s: switched to %s (says %s), want %s", found, got, sw.switched(), other)
		}
		if got, want := readFile(t, marker), fmt.Sprintf("%s %d", found, os.Getpid()); got != want {
			t.Errorf("marker %q, want %q", got, want)
		}
		if err := sw.restore(); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, file); got != found {
			t.Errorf("restored to %s, want %s", got, found)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Errorf("marker left after restore: %v", err)
		}
	}
}

func TestSwitchRCURefusesOddSettings(t *testing.T) {
	file, marker := rcuFiles(t, "2")
	if _, err := switchRCU(file, marker); err == nil {
		t.Error("switched a setting that is neither 0 nor 1")
	}
	if got := readFile(t, file); got != "2" {
		t.Errorf("the setting changed to %s", got)
	}
	if _, err := switchRCU(filepath.Join(t.TempDir(), "absent"), marker); err == nil {
		t.Error("switched a kernel without the switch")
	}
}

// A killed run's marker puts its found setting back; a live run's is left
// to that run; a garbled one is an error, not a guess.
func TestRestoreKilledRCU(t *testing.T) {
	const deadPid = 1<<31 - 1 // above any pid_max
	tests := []struct {
		name, marker, want, setting string
		wantErr                     bool
	}{
		{"none", "", "", "1", false},
		{"killed", fmt.Sprintf("0 %d", deadPid), "0", "0", false},
		{"live other run", fmt.Sprintf("0 %d", os.Getppid()), "", "1", false},
		{"garbled", "x", "", "1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file, marker := rcuFiles(t, "1")
			if tt.marker != "" {
				if err := os.MkdirAll(filepath.Dir(marker), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(marker, []byte(tt.marker+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := restoreKilledRCU(file, marker)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("restoreKilledRCU = %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
			if s := readFile(t, file); s != tt.setting {
				t.Errorf("setting %s, want %s", s, tt.setting)
			}
		})
	}
}
