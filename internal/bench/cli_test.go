package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/server/servertest"
)

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--quick", "--full"}, "exclusive"},
		{[]string{"--netns", "x"}, "--netns goes with --socket"},
		{[]string{"--socket", "/x.sock", "--dpd-arg=--attach-mode=tcx"}, "--dpd-arg goes with a dpd the driver starts"},
		{[]string{"-o", "yaml"}, "-o must be text or json"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--dpd"}, "flag needs an argument"},
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"--only-traffic", "--out", "B.md"}, "no report to write"},
		{[]string{"--no-traffic", "--out", "B.md"}, "--no-traffic goes with neither"},
		{[]string{"--no-traffic", "--only-traffic"}, "--no-traffic goes with neither"},
		{[]string{"--traffic-metrics", "crr"}, "go with --only-traffic"},
		{[]string{"--traffic-bpf-stats"}, "go with --only-traffic"},
		{[]string{"--only-traffic", "--traffic-metrics", "crr,tput"}, `no metric "tput"`},
		{[]string{"--traffic-rounds", "-1"}, "must not be negative"},
	}
	for _, tt := range tests {
		code, _, errOut := run(tt.args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("dpd-bench %v: exit %d, stderr %q; want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
}

func TestHelp(t *testing.T) {
	code, _, errOut := run("-h")
	if code != 0 || !strings.Contains(errOut, "usage: dpd-bench") || !strings.Contains(errOut, "-quick") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestRefusesMemoryDataplane: attached to a dpd that cannot run the
// kernel benchmarks, the driver fails before it creates anything and
// writes no report.
func TestRefusesMemoryDataplane(t *testing.T) {
	d := servertest.Start(t, "")
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	code, _, errOut := run("--quick", "--quiet", "--socket", d.Socket, "--out", out)
	if code != 1 || !strings.Contains(errOut, "memory") || !strings.Contains(errOut, "no report written") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a report was written: %v", err)
	}
}
