package bench

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// Scale is how much work each figure is measured on.
type Scale struct {
	Name       string // "full" or "quick"
	Endpoints  int    // P1 (per variant), P2, P3
	Policies   int    // P3's policies; endpoint i uses policy i mod Policies
	IPSets     int    // P3's IP sets
	SetMembers int    // members per IP set
	// TraceSample is how many endpoints P2 traces until they enforce the
	// change.
	TraceSample int
	// FanoutChanges is how many more changes P2 times after its first,
	// the rule turned back and forth (even, so the policy ends allowing):
	// one change on a shared machine is one draw of its scheduling.
	FanoutChanges int
	// Pace is P1's arrival interval between endpoints (a kubelet starts
	// far fewer than 50 pods a second).
	Pace time.Duration
	// PhaseTimeout bounds each wait of a phase; a deadline, not a target.
	PhaseTimeout time.Duration

	// BPFBenchTime and IngestBenchTime are `go test -benchtime` of the P4
	// and P5 benchmarks; BenchCount is their -count (the median is used).
	BPFBenchTime    string
	IngestBenchTime string
	BenchCount      int

	// TrafficSlice is the length of one P7 measurement, TrafficRounds how
	// many of each metric every case gets, alternating with the others
	// (medians are used); PortRules and SetRules are the lengths of P7's
	// rule lists.
	TrafficSlice  time.Duration
	TrafficRounds int
	// TrafficSteady is how long every path opens new connections before
	// P7's first measurement (trafficsteady.go); 0 skips it.
	TrafficSteady       time.Duration
	PortRules, SetRules int
}

// FullScale is the node scale the targets are set for: 1,000 endpoints,
// 1,000 policies, 100 IP sets of 1,000 members.
func FullScale() Scale {
	return Scale{
		Name: "full", Endpoints: 1000, Policies: 1000, IPSets: 100, SetMembers: 1000,
		TraceSample: 20, FanoutChanges: 10, Pace: 20 * time.Millisecond, PhaseTimeout: 3 * time.Minute,
		BPFBenchTime: "1000000x", IngestBenchTime: "2s", BenchCount: 3,
		TrafficSlice: 250 * time.Millisecond, TrafficRounds: 20, PortRules: 1000, SetRules: 100,
		TrafficSteady: 45 * time.Second, // well past a closed flow's timeout (10 s) and a scan interval (10 s)
	}
}

// QuickScale is the reduced mode: every figure, on 50 endpoints, in well
// under two minutes.
func QuickScale() Scale {
	return Scale{
		Name: "quick", Endpoints: 50, Policies: 50, IPSets: 10, SetMembers: 100,
		TraceSample: 5, FanoutChanges: 2, Pace: 10 * time.Millisecond, PhaseTimeout: time.Minute,
		BPFBenchTime: "20000x", IngestBenchTime: "5000x", BenchCount: 1,
		TrafficSlice: 20 * time.Millisecond, TrafficRounds: 2, PortRules: 1000, SetRules: 100,
	}
}

func (s Scale) validate() error {
	switch {
	case s.Endpoints < 2 || s.Endpoints > 60000:
		return fmt.Errorf("endpoints %d: want 2..60000", s.Endpoints)
	case s.Policies < 1 || s.IPSets < 1 || s.SetMembers < 1:
		return fmt.Errorf("policies, IP sets and set members must be positive")
	case s.IPSets*s.SetMembers > 1<<23:
		return fmt.Errorf("%d IP set members exceed the 10.128.0.0/9 they are drawn from", s.IPSets*s.SetMembers)
	case s.TraceSample < 1 || s.TraceSample > s.Endpoints:
		return fmt.Errorf("trace sample %d: want 1..%d", s.TraceSample, s.Endpoints)
	case s.FanoutChanges < 0 || s.FanoutChanges%2 != 0:
		return fmt.Errorf("fan-out changes %d: want an even count, so the shared policy ends allowing", s.FanoutChanges)
	case s.Pace <= 0 || s.PhaseTimeout <= 0:
		return fmt.Errorf("pace and phase timeout must be positive")
	case s.TrafficSlice <= 0 || s.TrafficRounds < 1:
		return fmt.Errorf("traffic slice and rounds must be positive")
	case s.PortRules < 1 || s.PortRules > 50000 || s.SetRules < 1 || s.SetRules > 256:
		return fmt.Errorf("traffic rules: want 1..50000 port rules and 1..256 IP-set rules")
	}
	return nil
}

// Options says what to measure and where.
type Options struct {
	Scale Scale
	// DPD is the dpd binary the driver starts (in a network namespace of
	// its own) unless Socket is set.
	DPD string
	// Socket attaches to a running dpd instead (--dataplane=linux). The
	// driver takes over its controller session, like `dpdctl apply`: what
	// the previous controller sent is removed. P3 is then not a fresh
	// start and P6 is that daemon's peak since it started.
	Socket string
	// NetNS, with Socket, names the network namespace whose interfaces
	// that dpd watches ("" is the driver's own).
	NetNS string
	// SourceDir is dpd's module root; the P4 and P5 benchmarks are run
	// there with `go test`. "" leaves P4 and P5 out.
	SourceDir string
	// GoBinary is the go command for SourceDir ("" finds it).
	GoBinary string
	// PinRoot is the bpffs directory the daemon's pin directory goes
	// under ("" is /sys/fs/bpf).
	PinRoot string
	// DaemonArgs are more flags for a started dpd (--attach-mode=tcx to
	// measure forced TCX on a kernel where auto picks legacy TC).
	DaemonArgs []string
	// OnlyTraffic measures P7 alone, on a daemon that has done nothing
	// else (no P1-P3 endpoints before it, no go benchmarks after): a quick
	// loop for work on the per-connection path.
	OnlyTraffic bool
	// NoTraffic leaves P7 out: a quick loop for work on the endpoint and
	// policy paths (P1-P3, P6).
	NoTraffic bool
	// TrafficMetrics, when not empty, are the only P7 metrics measured
	// ("rr", "crr", "bulk"); the others read zero.
	TrafficMetrics []string
	// TrafficBPFStats, with OnlyTraffic, turns the kernel's BPF run-time
	// statistics on for P7 and reports dpd's entry programs' run time per
	// new connection (trafficstats.go).
	TrafficBPFStats bool
	// SwitchRCU runs the daemon phases (all but P4 and P5) a second time
	// with the kernel's RCU grace periods switched between normal and
	// expedited (/sys/kernel/rcu_expedited, put back after): TCX attaches
	// cost a grace period each, so this measures dpd on the other kind of
	// kernel, one where TCX is cheap or one where it is slow.
	SwitchRCU bool
	// DaemonLog, when set, receives a copy of a started dpd's log when it
	// stops (the log is otherwise removed with the daemon's temp dir).
	DaemonLog string
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
}

// measures says whether P7 measures metric ("rr", "crr", "bulk").
func (o Options) measures(metric string) bool {
	return len(o.TrafficMetrics) == 0 || slices.Contains(o.TrafficMetrics, metric)
}
