package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A TCX attach, a next attach and a last detach each wait for an RCU grace
// period: ~10 ms on a kernel with normal grace periods, ~0.1 ms where they
// are expedited. Switching /sys/kernel/rcu_expedited turns the machine's
// kernel into the other kind, so one run measures dpd's daemon phases on
// a kernel where TCX is slow and on one where it is cheap, and the attach
// mode dpd's auto mode picks on each.

// rcuExpeditedFile is the kernel's switch for expedited grace periods.
const rcuExpeditedFile = "/sys/kernel/rcu_expedited"

// rcuNormalFile, at 1, overrides expedited grace periods with normal ones.
const rcuNormalFile = "/sys/kernel/rcu_normal"

// rcuMarkerFile keeps the setting a run found, and the run's pid, while it
// runs with the other one, so that a later run puts back what a killed
// run switched.
const rcuMarkerFile = "/run/dpd-bench.rcu_expedited"

// rcuSwitch is the kernel's grace-period setting switched for a pass.
type rcuSwitch struct {
	file, marker string
	found        string // the value found ("0" or "1"), put back by restore
}

// readRCU reads the setting: "0" (normal) or "1" (expedited).
func readRCU(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	v := strings.TrimSpace(string(b))
	if v != "0" && v != "1" {
		return "", fmt.Errorf("%s holds %q, want 0 or 1", file, v)
	}
	return v, nil
}

// switchRCU sets file to the other setting than the one it holds. The
// found one is written to marker first, so it is never lost.
func switchRCU(file, marker string) (*rcuSwitch, error) {
	found, err := readRCU(file)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(marker), 0o755); err != nil {
		return nil, fmt.Errorf("marker directory: %w", err)
	}
	if err := os.WriteFile(marker, fmt.Appendf(nil, "%s %d\n", found, os.Getpid()), 0o644); err != nil {
		return nil, fmt.Errorf("write marker: %w", err)
	}
	s := &rcuSwitch{file: file, marker: marker, found: found}
	if err := os.WriteFile(file, []byte(s.switched()+"\n"), 0o644); err != nil {
		return nil, errors.Join(fmt.Errorf("write %s: %w", file, err), s.restore())
	}
	return s, nil
}

// switched is the setting in force while the switch holds.
func (s *rcuSwitch) switched() string {
	if s.found == "1" {
		return "0"
	}
	return "1"
}

// restore puts the found setting back and removes the marker.
func (s *rcuSwitch) restore() error {
	if err := os.WriteFile(s.file, []byte(s.found+"\n"), 0o644); err != nil {
		return fmt.Errorf("restore %s to %s: %w", s.file, s.found, err)
	}
	if err := os.Remove(s.marker); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove marker: %w", err)
	}
	return nil
}

// restoreKilledRCU puts back the setting a killed run left switched, if
// its marker is there and its run is gone, and says what it put back (""
// when nothing).
func restoreKilledRCU(file, marker string) (string, error) {
	b, err := os.ReadFile(marker)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read marker: %w", err)
	}
	var found string
	var pid int
	if _, err := fmt.Sscanf(string(b), "%s %d", &found, &pid); err != nil || (found != "0" && found != "1") {
		return "", fmt.Errorf("marker %s holds %q, want a setting (0 or 1) and a pid", marker, b)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil && pid != os.Getpid() {
		return "", nil // that run still runs, and will put it back itself
	}
	s := &rcuSwitch{file: file, marker: marker, found: found}
	return found, s.restore()
}

// rcuText names a setting for the report.
func rcuText(v string) string {
	switch v {
	case "0":
		return "normal RCU grace periods"
	case "1":
		return "expedited RCU grace periods"
	}
	return "RCU setting unknown"
}
