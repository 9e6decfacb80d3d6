package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Results is everything one run measured. Fields of a phase that did not
// run stay zero; Figures says which of the targets were measured.
type Results struct {
	Scale    Scale
	Machine  Machine
	Started  time.Time
	Elapsed  time.Duration
	Attached bool // measured an already running dpd (Options.Socket)
	Load     Load
	Warnings []string // what makes a figure less than what it claims

	Veths    int           // veth pairs created up front (P3's)
	VethTime time.Duration // creating them

	Cold    ColdStart
	Fanout  Fanout
	Own     Latencies // P1: each endpoint with a policy of its own
	Shared  Latencies // P1: every endpoint with the one shared policy
	Memory  Memory
	Packets PacketCost
	Ingest  Ingest
	Attach  Attach // the daemon's attach mode and kernel costs
	// Forwarding is how the daemon passes packets between its pods:
	// "redirect", "stack", or "" (not reported).
	Forwarding string
	// ForwardingPeer: redirected packets of established flows went
	// straight into the destination pod's namespace.
	ForwardingPeer bool    `json:",omitempty"`
	Traffic        Traffic // P7

	// RCU is /sys/kernel/rcu_expedited during the daemon phases: "0"
	// (normal grace periods), "1" (expedited) or "" (not read).
	RCU string `json:",omitempty"`
	// Switched is the daemon phases measured again with RCU switched
	// (Options.SwitchRCU); nil when they were not.
	Switched *Results `json:",omitempty"`
}

// ColdStart is P3: a fresh daemon's snapshot to DataplaneInSync.
type ColdStart struct {
	Endpoints, Policies, IPSets, SetMembers int
	Messages                                int           // snapshot messages (InSync not counted)
	Bytes                                   int           // their encoded size
	InSync                                  time.Duration // first message sent -> DataplaneInSync received
	AllUp                                   time.Duration // first message sent -> the last endpoint's "up"
	Teardown                                time.Duration // removing the endpoints later (removalFigure)
}

// Fanout is P2: one policy change used by every endpoint.
type Fanout struct {
	Endpoints int
	Sampled   int
	Prepare   time.Duration // moving every endpoint onto the shared policy (not a target)
	TraceRTT  time.Duration // median Trace round trip before the change: the resolution
	FirstFlip time.Duration // change sent -> first sampled endpoint enforces it
	LastFlip  time.Duration // change sent -> last sampled endpoint enforces it
	// LastDeny is when the last trace that still answered deny started:
	// the last sampled endpoint to flip enforced the change between
	// LastDeny and LastFlip.
	LastDeny time.Duration
	// AllChecked is when Inspect, asked right after the last sampled flip,
	// showed every endpoint on the new program: an upper bound for all.
	AllChecked time.Duration
	// Programs is how many distinct ingress programs the endpoints ran
	// before and after the change (1 each: the program is shared).
	ProgramsBefore, ProgramsAfter int
	// Changes are the last sampled flips of the further changes
	// (Scale.FanoutChanges), timed as the first.
	Changes []time.Duration
}

// medianChange is the median of the further changes' flips (0 for none).
func (f Fanout) medianChange() time.Duration {
	v := make([]float64, len(f.Changes))
	for i, d := range f.Changes {
		v[i] = float64(d)
	}
	return time.Duration(medianOf(v))
}

// Memory is P6: dpd's resident set read from /proc after P3.
type Memory struct {
	Pid     int
	PeakRSS uint64 // VmHWM
	RSS     uint64 // VmRSS
}

// Latencies are P1's per-endpoint times, sorted.
type Latencies struct {
	Endpoints int
	Policies  int // distinct policies among them
	Pace      time.Duration
	Samples   []time.Duration // of the endpoints that came up
	// Missing endpoints never reported up within Waited of the last send;
	// they rank above every sample.
	Missing    int
	MissingWhy map[string]int // dpd's status and reason for them, counted
	// DownFirst endpoints were reported "down" before "up": dpd had the
	// update before it knew the interface was up.
	DownFirst int
	Waited    time.Duration
	Teardown  time.Duration // removing them again (removalFigure)
}

// Quantile is the nearest-rank q-quantile over the samples and the
// missing endpoints (0 when there are none); ok is false when it falls on
// a missing endpoint, whose latency is unknown but above Waited.
func (l Latencies) Quantile(q float64) (d time.Duration, ok bool) {
	n := len(l.Samples) + l.Missing
	if n == 0 {
		return 0, true
	}
	i := min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)
	if i >= len(l.Samples) {
		return 0, false
	}
	return l.Samples[i], true
}

func newLatencies(samples []time.Duration) Latencies {
	s := slices.Clone(samples)
	slices.Sort(s)
	return Latencies{Samples: s}
}

// PacketCost is P4, in ns per packet as BPF_PROG_TEST_RUN reports it.
type PacketCost struct {
	EntryTrivial float64 // a program that only returns TC_ACT_OK
	Established  float64 // entry program, conntrack hit
	Reply        float64 // entry program, conntrack reply
	EntryDeny    float64 // entry program, no flow, tail call to a deny policy
	// PolicyTrivial is BenchmarkPolicy's "return 0" program; NewFlow its
	// cases by "<kind>/n=<rules>/<first|last>".
	PolicyTrivial float64
	NewFlow       map[string]float64
	// IPv6 is the same for IPv6 packets (BenchmarkEntry6, BenchmarkPolicy6);
	// its NewFlow holds the cases that benchmark has.
	IPv6      *PacketCost `json:",omitempty"`
	GoVersion string      // of the toolchain that ran the benchmarks
}

// ipv6Figure is a P4 figure of the IPv6 benchmarks: the established flow
// when key is "", else the new-flow case key.
func (r *Results) ipv6Figure(name, key string, limit float64) Figure {
	f := Figure{ID: "P4", Name: name, Unit: "×", Limit: limit}
	p := r.Packets.IPv6
	if p == nil {
		return f
	}
	num, den := p.Established, p.EntryTrivial
	if key != "" {
		num, den = p.NewFlow[key], p.PolicyTrivial
	}
	if num > 0 && den > 0 {
		f.Value, f.Measured = num/den, true
	}
	return f
}

// smallPolicyFigure is a P4 figure of a policy whose cost is mostly fixed
// (few rules, or the first rule deciding), in ns against Calico's cost for
// the same case plus 10 ns: calico is Calico's figure in × noop, measured
// side by side with its policy compiler, so the bound scales with this
// machine's noop. The value also shows × noop.
func (r *Results) smallPolicyFigure(name, key string, calico float64) Figure {
	p := r.Packets
	f := Figure{ID: "P4", Name: fmt.Sprintf("%s (Calico %.1f× noop + 10 ns)", name, calico), Unit: "ns"}
	ns, noop := p.NewFlow[key], p.PolicyTrivial
	if ns <= 0 || noop <= 0 {
		return f
	}
	f.Value, f.Limit, f.Measured = ns, calico*noop+smallPolicySlack, true
	f.Note = fmt.Sprintf("%s (%.1f× noop)", formatValue(ns, "ns"), ns/noop)
	return f
}

// smallPolicySlack is what dpd may spend beyond Calico on a small policy
// or a first-rule match, in ns.
const smallPolicySlack = 10

// Ingest is P5, in messages per second through one stream.
type Ingest struct {
	Stream float64 // BenchmarkSyncIngest: dpd's server and engine
	Raw    float64 // BenchmarkSyncIngestRaw: a gRPC server that discards
	// Ratios are Stream over Raw of each round, both measured back to
	// back; P5 is their median (Stream and Raw are medians of their own).
	Ratios []float64
}

// ratio is P5: the median of the rounds' ratios, or, for results without
// rounds, the ratio of the medians.
func (in Ingest) ratio() (float64, bool) {
	if len(in.Ratios) > 0 {
		return medianOf(in.Ratios), true
	}
	if in.Stream <= 0 || in.Raw <= 0 {
		return 0, false
	}
	return in.Stream / in.Raw, true
}

// Figure is one row of the results table: a value against its target.
type Figure struct {
	ID       string // "P1" .. "P6"
	Name     string
	Value    float64 // in Unit
	Unit     string  // "ms", "s", "×", "%", "MiB"
	Limit    float64 // the target's bound, in Unit
	AtLeast  bool    // the target is Value >= Limit (else Value <= Limit)
	Measured bool
	Note     string // replaces the value when it is not a number (+Inf)
}

// Met reports whether a measured figure meets its target.
func (f Figure) Met() bool {
	if !f.Measured {
		return false
	}
	if f.AtLeast {
		return f.Value >= f.Limit
	}
	return f.Value <= f.Limit
}

// ValueText is the value with its unit ("not measured" without one).
func (f Figure) ValueText() string {
	if !f.Measured {
		return "not measured"
	}
	if f.Note != "" {
		return f.Note
	}
	return formatValue(f.Value, f.Unit)
}

// TargetText is "≤ 2 ms" or "≥ 60 %".
func (f Figure) TargetText() string {
	op := "≤"
	if f.AtLeast {
		op = "≥"
	}
	return op + " " + formatValue(f.Limit, f.Unit)
}

func formatValue(v float64, unit string) string {
	if unit == "ms" && v >= 1000 {
		v, unit = v/1000, "s"
	}
	switch {
	case unit == "×":
		return fmt.Sprintf("%.1f×", v)
	case v >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	return fmt.Sprintf("%.2f %s", v, unit)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Figures are the required figures, each with its target and what this
// run measured.
func (r *Results) Figures() []Figure {
	p := r.Packets
	ratio := func(num, den float64) (float64, bool) {
		if num <= 0 || den <= 0 {
			return 0, false
		}
		return num / den, true
	}
	newFlow := func(id, name, key string, limit float64) Figure {
		v, ok := ratio(p.NewFlow[key], p.PolicyTrivial)
		return Figure{ID: id, Name: name, Value: v, Unit: "×", Limit: limit, Measured: ok}
	}
	est, estOK := ratio(p.Established, p.EntryTrivial)
	ing, ingOK := r.Ingest.ratio()
	lat := func(name string, l Latencies, q, limit float64) Figure {
		f := Figure{ID: "P1", Name: name, Unit: "ms", Limit: limit, Measured: len(l.Samples)+l.Missing > 0}
		if d, ok := l.Quantile(q); ok {
			f.Value = ms(d)
		} else {
			f.Value = math.Inf(1)
			f.Note = fmt.Sprintf("> %s: %d of %d endpoints never came up", l.Waited.Round(time.Second), l.Missing, l.Endpoints)
		}
		return f
	}
	return append([]Figure{
		lat("endpoint update → up, p50 (own policy each)", r.Own, 0.50, 2),
		lat("endpoint update → up, p99 (own policy each)", r.Own, 0.99, 10),
		lat("endpoint update → up, p50 (shared policy)", r.Shared, 0.50, 2),
		lat("endpoint update → up, p99 (shared policy)", r.Shared, 0.99, 10),
		{ID: "P2", Name: "policy change → enforced by all (last sampled trace flip)", Value: ms(r.Fanout.LastFlip), Unit: "ms", Limit: 20, Measured: r.Fanout.LastFlip > 0},
		{ID: "P2", Name: fmt.Sprintf("the same, median of %d further changes", len(r.Fanout.Changes)), Value: ms(r.Fanout.medianChange()), Unit: "ms", Limit: 10, Measured: len(r.Fanout.Changes) > 0},
		{ID: "P3", Name: "cold start → DataplaneInSync", Value: r.Cold.InSync.Seconds(), Unit: "s", Limit: 3, Measured: r.Cold.InSync > 0},
		{ID: "P4", Name: "established flow (conntrack hit) vs trivial", Value: est, Unit: "×", Limit: 4, Measured: estOK},
		newFlow("P4", "new flow, last of 1,000 TCP port rules", "tcp-ports/n=1000/last", 10),
		newFlow("P4", "new flow, last of 1,000 /32 CIDR rules", "cidr32/n=1000/last", 10),
		newFlow("P4", "new flow, last of 100 IP-set rules", "ipsets/n=100/last", 30),
		newFlow("P4", "new flow, last of 1,000 IP-set rules (one set each)", "ipsets/n=1000/last", 10),
		newFlow("P4", "new flow, last of 10,000 IP-set rules (one set each)", "ipsets/n=10000/last", 10),
		newFlow("P4", "new flow, last of 10,000 port rules sharing one IP set", "ipset-shared/n=10000/last", 10),
		r.smallPolicyFigure("new flow, first of 10 TCP port rules", "tcp-ports/n=10/first", 1.2),
		r.smallPolicyFigure("new flow, first of 1,000 TCP port rules", "tcp-ports/n=1000/first", 1.7),
		r.smallPolicyFigure("new flow, last of 10 TCP port rules", "tcp-ports/n=10/last", 1.6),
		r.smallPolicyFigure("new flow, last of 10 /32 CIDR rules", "cidr32/n=10/last", 1.5),
		r.ipv6Figure("established IPv6 flow (conntrack hit) vs trivial", "", 4),
		r.ipv6Figure("new IPv6 flow, last of 1,000 /128 CIDR rules", "cidr128/n=1000/last", 10),
		r.ipv6Figure("new IPv6 flow, last of 100 IPv6 IP-set rules", "ipsets6/n=100/last", 30),
		{ID: "P5", Name: "ingest through one stream vs raw gRPC", Value: 100 * ing, Unit: "%", Limit: 60, AtLeast: true, Measured: ingOK},
		{ID: "P6", Name: "peak RSS of dpd after P3", Value: float64(r.Memory.PeakRSS) / (1 << 20), Unit: "MiB", Limit: 64, Measured: r.Memory.PeakRSS > 0},
		r.removalFigure(),
	}, r.trafficFigures()...)
}

// removalFigure is the slowest removal of a phase's endpoints, P3's or
// either P1 variant's, each as many as the scale's endpoints, held to 1 s.
func (r *Results) removalFigure() Figure {
	d := max(r.Cold.Teardown, r.Own.Teardown, r.Shared.Teardown)
	return Figure{ID: "removal", Name: fmt.Sprintf("removing %s endpoints (the slowest of P3's and P1's removals)", thousands(r.Scale.Endpoints)),
		Value: ms(d), Unit: "ms", Limit: 1000, Measured: d > 0}
}

// daemonFigure says whether a figure is measured by the daemon phases,
// and so by a switched pass; P4 and P5 are go benchmarks that attach
// nothing and are measured once.
func daemonFigure(f Figure) bool { return f.ID != "P4" && f.ID != "P5" }
