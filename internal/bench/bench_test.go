package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/server/felixconv"
)

const sampleOutput = `goos: linux
goarch: amd64
pkg: github.com/dpd-dev/dpd/dataplane/tcbpf
BenchmarkEntry/trivial-2         	  100000	        21.49 ns/op	        15.00 ns/pkt
BenchmarkEntry/ct_hit-2          	  100000	        93.44 ns/op	        74.00 ns/pkt
BenchmarkEntry/ct_hit-2          	  100000	        90.00 ns/op	        70.00 ns/pkt
BenchmarkEntry/ct_hit-2          	  100000	        99.00 ns/op	        90.00 ns/pkt
BenchmarkPolicy/noop-2         	    1000	        15.00 ns/op
BenchmarkPolicy/tcp-ports/n=1000/last-2        	    1000	        74.00 ns/op
BenchmarkPolicy/ipsets/n=100/last-12        	    1000	        65.00 ns/op
BenchmarkSyncIngest-2      	   20000	     26702 ns/op	     37342 msgs/s
BenchmarkSyncIngestRaw   	   20000	      8920 ns/op	    112040 msgs/s
BenchmarkBroken-2   	   garbage
--- FAIL: BenchmarkOther
PASS
ok  	github.com/dpd-dev/dpd/dataplane/tcbpf	0.207s
`

func TestParseBench(t *testing.T) {
	res := parseBench(sampleOutput)
	tests := []struct {
		name, unit string
		want       float64
	}{
		{"BenchmarkEntry/trivial", "ns/pkt", 15},
		{"BenchmarkEntry/ct_hit", "ns/pkt", 74}, // median of 70, 74, 90
		{"BenchmarkEntry/ct_hit", "ns/op", 93.44},
		{"BenchmarkPolicy/noop", "ns/op", 15},
		{"BenchmarkPolicy/tcp-ports/n=1000/last", "ns/op", 74},
		{"BenchmarkPolicy/ipsets/n=100/last", "ns/op", 65},
		{"BenchmarkSyncIngest", "msgs/s", 37342},
		{"BenchmarkSyncIngestRaw", "msgs/s", 112040},
		{"BenchmarkBroken", "ns/op", 0},
		{"BenchmarkEntry/trivial", "msgs/s", 0},
	}
	for _, tt := range tests {
		if got := res.median(tt.name, tt.unit); got != tt.want {
			t.Errorf("median(%s, %s) = %v, want %v", tt.name, tt.unit, got, tt.want)
		}
	}
	p := packetCost(res, "go1.x")
	if p.EntryTrivial != 15 || p.Established != 74 || p.PolicyTrivial != 15 || len(p.NewFlow) != 2 {
		t.Errorf("packetCost = %+v", p)
	}
}

func TestMedianOfEvenCount(t *testing.T) {
	res := parseBench("BenchmarkX-2 1 10 ns/op\nBenchmarkX-2 1 20 ns/op\n")
	if got := res.median("BenchmarkX", "ns/op"); got != 15 {
		t.Errorf("median = %v, want 15", got)
	}
}

func TestQuantile(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- {
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	l := newLatencies(samples)
	partial := l
	partial.Missing, partial.Endpoints = 2, 102 // the two slowest never came up
	tests := []struct {
		l      Latencies
		q      float64
		want   time.Duration
		wantOK bool
	}{
		{l, 0, time.Millisecond, true},
		{l, 0.5, 50 * time.Millisecond, true},
		{l, 0.99, 99 * time.Millisecond, true},
		{l, 1, 100 * time.Millisecond, true},
		{partial, 0.5, 51 * time.Millisecond, true},
		{partial, 0.98, 100 * time.Millisecond, true},
		{partial, 0.99, 0, false},
		{Latencies{}, 0.5, 0, true},
	}
	for _, tt := range tests {
		if got, ok := tt.l.Quantile(tt.q); got != tt.want || ok != tt.wantOK {
			t.Errorf("Quantile(%v) of %d+%d = %v, %v; want %v, %v", tt.q, len(tt.l.Samples), tt.l.Missing, got, ok, tt.want, tt.wantOK)
		}
	}
	f := (&Results{Own: partial}).Figures()[1]
	if f.Met() || !math.IsInf(f.Value, 1) || !strings.Contains(f.ValueText(), "2 of 102 endpoints never came up") {
		t.Errorf("p99 with missing endpoints: %+v %q", f, f.ValueText())
	}
}

func TestFigureMet(t *testing.T) {
	tests := []struct {
		f    Figure
		want bool
	}{
		{Figure{Value: 2, Limit: 2, Measured: true}, true},
		{Figure{Value: 2.1, Limit: 2, Measured: true}, false},
		{Figure{Value: 60, Limit: 60, AtLeast: true, Measured: true}, true},
		{Figure{Value: 59, Limit: 60, AtLeast: true, Measured: true}, false},
		{Figure{Value: 0, Limit: 2}, false},
	}
	for _, tt := range tests {
		if got := tt.f.Met(); got != tt.want {
			t.Errorf("%+v.Met() = %v, want %v", tt.f, got, tt.want)
		}
	}
}

func TestFiguresCoverEveryTarget(t *testing.T) {
	r := &Results{
		Own:     newLatencies([]time.Duration{3 * time.Millisecond, 3 * time.Millisecond}),
		Shared:  newLatencies([]time.Duration{time.Millisecond}),
		Fanout:  Fanout{LastFlip: 5 * time.Millisecond, Changes: []time.Duration{9 * time.Millisecond, 30 * time.Millisecond, 12 * time.Millisecond}},
		Cold:    ColdStart{InSync: 2 * time.Second, Teardown: 1200 * time.Millisecond},
		Memory:  Memory{PeakRSS: 70 << 20},
		Ingest:  Ingest{Stream: 30, Raw: 100},
		Packets: PacketCost{EntryTrivial: 10, Established: 30, PolicyTrivial: 10, NewFlow: map[string]float64{"tcp-ports/n=1000/last": 50}},
	}
	got := map[string]int{}
	var missed []string
	for _, f := range r.Figures() {
		got[f.ID]++
		if f.Measured && !f.Met() {
			missed = append(missed, f.Name)
		}
	}
	for id, n := range map[string]int{"P1": 4, "P2": 2, "P3": 1, "P4": 14, "P5": 1, "P6": 1, "P7": 8, "removal": 1} {
		if got[id] != n {
			t.Errorf("%d %s figures, want %d", got[id], id, n)
		}
	}
	want := []string{"endpoint update → up, p50 (own policy each)", "the same, median of 3 further changes", "ingest through one stream vs raw gRPC", "peak RSS of dpd after P3",
		"removing 0 endpoints (the slowest of P3's and P1's removals)"}
	if !slices.Equal(missed, want) {
		t.Errorf("missed %q, want %q", missed, want)
	}
}

// TestSmallPolicyFigure: the bound is Calico's × noop on this run's noop
// plus 10 ns, and the value shows ns and × noop.
func TestSmallPolicyFigure(t *testing.T) {
	r := &Results{Packets: PacketCost{PolicyTrivial: 15, NewFlow: map[string]float64{
		"tcp-ports/n=10/first": 28, "cidr32/n=10/last": 33}}}
	byName := map[string]Figure{}
	for _, f := range r.Figures() {
		byName[f.Name] = f
	}
	first := byName["new flow, first of 10 TCP port rules (Calico 1.2× noop + 10 ns)"]
	if !first.Measured || first.Limit != 28 || !first.Met() || first.ValueText() != "28 ns (1.9× noop)" {
		t.Errorf("first of 10 ports: %+v (%s), want 28 ns against ≤ 28 ns, met", first, first.ValueText())
	}
	cidr := byName["new flow, last of 10 /32 CIDR rules (Calico 1.5× noop + 10 ns)"]
	if !cidr.Measured || cidr.Limit != 32.5 || cidr.Met() {
		t.Errorf("last of 10 CIDRs: %+v, want 33 ns against ≤ 32.5 ns, not met", cidr)
	}
	if f := byName["new flow, last of 10 TCP port rules (Calico 1.6× noop + 10 ns)"]; f.Measured {
		t.Errorf("a case the run lacks is measured: %+v", f)
	}
}

func TestNotesSurviveRegeneration(t *testing.T) {
	r := &Results{Scale: QuickScale()}
	if got := Notes(r.Markdown("")); got != "" {
		t.Errorf("notes of a report without any = %q", got)
	}
	notes := "P3 is limited by X.\n\n* and Y"
	doc := r.Markdown(notes)
	if got := Notes(doc); got != notes {
		t.Errorf("Notes = %q, want %q", got, notes)
	}
	if got := Notes(r.Markdown(Notes(doc))); got != notes {
		t.Errorf("notes after a second regeneration = %q", got)
	}
	for _, id := range []string{"| P1 |", "| P2 |", "| P3 |", "| P4 |", "| P5 |", "| P6 |", "## Machine", "## Method"} {
		if !strings.Contains(doc, id) {
			t.Errorf("report lacks %q", id)
		}
	}
}

func TestSampleIndexes(t *testing.T) {
	tests := []struct {
		n, k int
		want []int
	}{
		{1000, 5, []int{0, 249, 499, 749, 999}},
		{10, 1, []int{9}},
		{3, 3, []int{0, 1, 2}},
		{2, 5, []int{0, 1}},
	}
	for _, tt := range tests {
		if got := sampleIndexes(tt.n, tt.k); !slices.Equal(got, tt.want) {
			t.Errorf("sampleIndexes(%d, %d) = %v, want %v", tt.n, tt.k, got, tt.want)
		}
	}
}

// TestScenarioIsValid sends every kind of message the driver builds
// through dpd's own validation, and checks that names fit the kernel's.
func TestScenarioIsValid(t *testing.T) {
	s := QuickScale()
	msgs := policyState(s)
	msgs = append(msgs, sharedPolicyUpdate(true))
	for _, b := range []byte{batchColdStart, batchOwnPolicy, batchShared} {
		msgs = append(msgs, endpointUpdate(b, 0, policyName(0)), endpointUpdate(b, 59999, sharedPolicy), endpointRemove(b, 1))
		for _, name := range []string{ifaceName(b, 59999), peerName(b, 59999)} {
			if len(name) > 15 {
				t.Errorf("interface name %q is longer than IFNAMSIZ-1", name)
			}
		}
	}
	for i, m := range msgs {
		if _, err := felixconv.Translate(m); err != nil {
			t.Errorf("message %d (%T): %v", i, m.GetPayload(), err)
		}
	}
	seen := map[string]bool{}
	for j := range s.IPSets {
		for _, m := range setMembers(j, s.SetMembers) {
			if seen[m] {
				t.Fatalf("member %s in two sets", m)
			}
			seen[m] = true
		}
	}
	if a, b := endpointIP(batchColdStart, 5), endpointIP(batchShared, 5); a == b {
		t.Errorf("batches share address %s", a)
	}
}

func TestScaleValidate(t *testing.T) {
	for _, s := range []Scale{FullScale(), QuickScale()} {
		if err := s.validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	}
	bad := QuickScale()
	bad.TraceSample = bad.Endpoints + 1
	if bad.validate() == nil {
		t.Error("a trace sample larger than the endpoints passed")
	}
}

func TestLoadBetween(t *testing.T) {
	a := cpuSample{total: 1000, busy: 100, dpd: 10, driver: 5, dpdPid: 7}
	b := cpuSample{total: 2000, busy: 900, dpd: 410, driver: 105, dpdPid: 7}
	dpd, driver, other := loadBetween(a, b)
	if dpd != 0.4 || driver != 0.1 || other < 0.299 || other > 0.301 {
		t.Errorf("loadBetween = %v %v %v, want 0.4 0.1 0.3", dpd, driver, other)
	}
}

func TestUniqueWarnings(t *testing.T) {
	r := &Results{Warnings: []string{"a", "b", "a", "a"}}
	if got := r.uniqueWarnings(); !slices.Equal(got, []string{"a (3 times)", "b"}) {
		t.Errorf("got %q", got)
	}
}

// TestIngestRatioOfRounds: P5 is the median of the rounds' own ratios, not
// the ratio of two medians a drifting machine moved apart.
func TestIngestRatioOfRounds(t *testing.T) {
	// The machine slowed by half after the first rounds: each round's
	// ratio is 0.7, the medians' ratio 0.5.
	in := Ingest{Stream: 35, Raw: 70, Ratios: []float64{0.7, 0.7, 0.7}}
	if r, ok := in.ratio(); !ok || r != 0.7 {
		t.Errorf("ratio %v %v, want the rounds' 0.7", r, ok)
	}
	if r, ok := (Ingest{Stream: 30, Raw: 100}).ratio(); !ok || r != 0.3 {
		t.Errorf("without rounds: ratio %v %v, want 0.3", r, ok)
	}
	if _, ok := (Ingest{}).ratio(); ok {
		t.Error("nothing measured, yet a ratio")
	}
}

// With a switched pass the report gives each figure of the daemon phases
// twice, P4 and P5 once, the second pass's misses labelled, and its
// kernel costs and details beside the first's.
func TestSwitchedPassReport(t *testing.T) {
	pass := func(rcu, mode string, p1 time.Duration) *Results {
		return &Results{
			Scale: FullScale(), RCU: rcu,
			Attach: Attach{Mode: mode, Reason: "because", Costs: []KernelCost{{Op: "tcx_first_attach", Probe: 110 * time.Microsecond}}},
			Own:    newLatencies([]time.Duration{p1}), Shared: newLatencies([]time.Duration{time.Millisecond}),
			Cold: ColdStart{InSync: time.Second, Teardown: 300 * time.Millisecond},
		}
	}
	r := pass("0", "tc", time.Millisecond)
	r.Packets = PacketCost{EntryTrivial: 10, Established: 30}
	r.Switched = pass("1", "tcx", 3*time.Millisecond)
	doc := r.Markdown("")
	for _, want := range []string{
		"| P1 | endpoint update → up, p50 (own policy each) | 1 ms | ≤ 2 ms | yes | 3 ms | **no** |",
		"| P4 | established flow (conntrack hit) vs trivial | 3.0× | ≤ 4.0× | yes | (once) | - |",
		"| removal | removing 1,000 endpoints (the slowest of P3's and P1's removals) | 300 ms | ≤ 1 s | yes | 300 ms | yes |",
		"* P1 endpoint update → up, p50 (own policy each), with expedited RCU grace periods, attach mode tcx: 3 ms against ≤ 2 ms",
		"## Details with expedited RCU grace periods, attach mode tcx",
		"**With expedited RCU grace periods** (`/sys/kernel/rcu_expedited` = 1). Attach mode **tcx**",
		"| attach mode, normal RCU grace periods | tc: because |",
		"where dpd's probe read a first TCX attach at 110 µs and dpd chose attach mode tcx",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(doc, "P4 established flow (conntrack hit) vs trivial, with") {
		t.Error("a figure measured once is listed as a miss of the switched pass")
	}
	text := r.Text()
	if !strings.Contains(text, "SWITCHED: expedited RCU grace periods, attach mode tcx (/sys/kernel/rcu_expedited=1)") {
		t.Errorf("text output does not say what the switched column is:\n%s", text)
	}
}
