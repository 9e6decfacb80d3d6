package ctl_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/server/servertest"
)

func TestBenchUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--quick", "--full"}, "exclusive"},
		{[]string{"bench", "--netns", "x"}, "--netns goes with --socket"},
		{[]string{"bench", "-o", "yaml"}, "-o must be text or json"},
		{[]string{"bench", "extra"}, "unexpected arguments"},
		{[]string{"bench", "--dpd"}, "flag needs an argument"},
	}
	for _, tt := range tests {
		code, _, errOut := run(tt.args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("dpdctl %v: exit %d, stderr %q; want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
}

// TestBenchRefusesMemoryDataplane: attached to a dpd that cannot run the
// kernel benchmarks, bench fails before it creates anything and writes no
// report.
func TestBenchRefusesMemoryDataplane(t *testing.T) {
	d := servertest.Start(t, "")
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	code, _, errOut := run("bench", "--quick", "--quiet", "--socket", d.Socket, "--out", out)
	if code != 1 || !strings.Contains(errOut, "memory") || !strings.Contains(errOut, "no report written") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a report was written: %v", err)
	}
}
