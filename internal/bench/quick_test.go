package bench

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/daemontest"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestQuickRun runs the reduced mode end to end against the real daemon,
// so the harness cannot rot: every figure must come out measured and
// sane. It never judges a time against a target.
func TestQuickRun(t *testing.T) {
	testutil.RequirePrivileged(t)
	root, err := daemontest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := goCommand("")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "dpd")
	if err := daemontest.Build("./cmd/dpd", bin); err != nil {
		t.Fatal(err)
	}

	// A hang guard, not a timing assertion.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := QuickScale()
	rcu, err := readRCU(rcuExpeditedFile)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, Options{Scale: s, DPD: bin, SourceDir: root, GoBinary: goBin, Progress: testLog{t}, SwitchRCU: true})
	if err != nil {
		t.Fatalf("bench run: %v", err)
	}
	checkLeftovers(t)
	checkSwitchedPass(t, res, rcu)

	for _, f := range res.Figures() {
		if !f.Measured || !(f.Value > 0) || math.IsInf(f.Value, 0) {
			t.Errorf("%s %s: %s (value %v)", f.ID, f.Name, f.ValueText(), f.Value)
		}
	}
	for name, l := range map[string]Latencies{"own": res.Own, "shared": res.Shared} {
		if len(l.Samples) != s.Endpoints || l.Missing != 0 || l.Samples[0] <= 0 {
			t.Errorf("P1 %s: %d samples (%d missing), fastest %v", name, len(l.Samples), l.Missing, l.Samples)
		}
	}
	if f := res.Fanout; f.FirstFlip <= 0 || f.FirstFlip > f.LastFlip || f.LastFlip > f.AllChecked || f.TraceRTT <= 0 {
		t.Errorf("P2 out of order: %+v", f)
	}
	if c := res.Cold; c.InSync <= 0 || c.AllUp <= 0 || c.Messages != s.IPSets+s.Policies+2+s.Endpoints {
		t.Errorf("P3: %+v", c)
	}
	if m := res.Memory; m.PeakRSS < 1<<20 || m.PeakRSS < m.RSS || m.PeakRSS > 64<<30 {
		t.Errorf("P6: %+v", m)
	}
	p := res.Packets
	for _, kind := range []string{"tcp-ports", "cidr32", "ipsets"} {
		for _, n := range []int{10, 100} {
			for _, pos := range []string{"first", "last"} {
				key := kind + "/n=" + strconv.Itoa(n) + "/" + pos
				if v := p.NewFlow[key]; !(v > 0) || math.IsInf(v, 0) {
					t.Errorf("P4 %s: %v ns", key, v)
				}
			}
		}
	}
	if r := res.Ingest.Stream / res.Ingest.Raw; !(r > 0 && r < 2) {
		t.Errorf("P5: %v of %v msgs/s", res.Ingest.Stream, res.Ingest.Raw)
	}
	if len(res.Traffic.Cases) != len(trafficCases) {
		t.Errorf("P7: %d cases, want %d", len(res.Traffic.Cases), len(trafficCases))
	}
	for _, c := range res.Traffic.Cases {
		// The plain path and the floor are measured under every rule list.
		n := s.TrafficRounds
		if c.Key == "plain" || c.Key == "tc-floor" {
			n *= len(trafficConfigs)
		}
		for name, v := range map[string][]float64{"request/response": c.RR, "connection rate": c.CRR, "bulk": c.Bulk} {
			if len(v) != n || slices.Min(v) <= 0 {
				t.Errorf("P7 %s %s: %v", c.Key, name, v)
			}
		}
		if c.Key != "plain" && (len(c.BaseCRR) != n || len(c.BaseBulk) != n || len(c.BaseRR) != n) {
			t.Errorf("P7 %s: %d/%d/%d plain measurements beside its %d", c.Key, len(c.BaseRR), len(c.BaseCRR), len(c.BaseBulk), n)
		}
		if dpd := len(c.Verdicts) > 0; dpd && (len(c.FloorCRR) != n || len(c.FloorBulk) != n || len(c.FloorRR) != n) {
			t.Errorf("P7 %s: %d/%d/%d floor measurements beside its %d", c.Key, len(c.FloorRR), len(c.FloorCRR), len(c.FloorBulk), n)
		}
		// Every new connection went through dpd's policy once.
		for _, v := range c.Verdicts {
			if v < 0.99 || v > 1.2 {
				t.Errorf("P7 %s: %.3f policy verdicts per new connection", c.Key, v)
			}
		}
	}
	if a := res.Attach; a.Mode == "" || a.Reason == "" || len(a.Costs) < len(kernelOps) {
		t.Errorf("kernel costs: %+v", a)
	}
	for _, c := range res.Attach.Costs {
		if c.Op == "program_load" && c.Probe <= 0 {
			t.Errorf("program load not probed: %+v", c)
		}
	}
	if l := res.Load; l.LoadAvg == "" || !(l.DPD > 0) {
		t.Errorf("load: %+v", l)
	}
	doc := res.Markdown("")
	for _, f := range res.Figures() {
		if !strings.Contains(doc, "| "+f.ID+" | "+f.Name+" | "+f.ValueText()+" |") {
			t.Errorf("report lacks the row of %s %s", f.ID, f.Name)
		}
	}
}

// checkSwitchedPass fails t unless the run measured every daemon figure
// again with the RCU setting switched, and put the setting found back.
func checkSwitchedPass(t *testing.T, res *Results, found string) {
	t.Helper()
	if got, err := readRCU(rcuExpeditedFile); got != found {
		t.Errorf("%s is %q after the run (%v), was %s", rcuExpeditedFile, got, err, found)
	}
	if _, err := os.Stat(rcuMarkerFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker %s left behind (%v)", rcuMarkerFile, err)
	}
	sw := res.Switched
	if res.RCU != found || sw == nil || sw.RCU == found || sw.RCU == "" {
		t.Fatalf("passes with RCU %q then %+v, want %s then the other", res.RCU, sw, found)
	}
	for _, f := range sw.Figures() {
		if daemonFigure(f) && (!f.Measured || !(f.Value > 0) || math.IsInf(f.Value, 0)) {
			t.Errorf("switched pass: %s %s: %s", f.ID, f.Name, f.ValueText())
		}
	}
	if a := sw.Attach; a.Mode == "" || len(a.Costs) < len(kernelOps) {
		t.Errorf("switched pass's kernel costs: %+v", a)
	}
}

// checkLeftovers fails t if the run left its namespace or pins behind.
func checkLeftovers(t *testing.T) {
	t.Helper()
	name := nsPrefix + strconv.Itoa(os.Getpid())
	for _, p := range []string{filepath.Join("/run/netns", name), filepath.Join("/sys/fs/bpf", name)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
}

// testLog passes progress lines to t.Log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
