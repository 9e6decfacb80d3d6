package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// NotesBegin and NotesEnd delimit the hand-written analysis in
// BENCHMARKS.md. Markdown keeps it across runs: the figures are
// regenerated, the explanation of the misses is not.
const (
	NotesBegin = "<!-- bench:notes:begin -->"
	NotesEnd   = "<!-- bench:notes:end -->"
)

// Notes returns the hand-written part of an earlier report ("" if none).
func Notes(doc string) string {
	_, rest, ok := strings.Cut(doc, NotesBegin)
	if !ok {
		return ""
	}
	notes, _, ok := strings.Cut(rest, NotesEnd)
	if !ok || strings.TrimSpace(notes) == noNotes {
		return ""
	}
	return strings.TrimSpace(notes)
}

// noNotes stands in for an analysis not written yet.
const noNotes = "(No analysis written yet.)"

// Text is the results table for a terminal; with a switched pass, its
// values follow in two more columns.
func (r *Results) Text() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	sw := r.switchedFigures()
	if r.Switched != nil {
		_, _ = fmt.Fprintf(tw, "%s\n%s\n", r.passLine("VALUE"), r.Switched.passLine("SWITCHED"))
		_, _ = fmt.Fprintf(tw, "FIGURE\tWHAT\tVALUE\tTARGET\tMET\tSWITCHED\tMET\n")
	} else {
		_, _ = fmt.Fprintf(tw, "FIGURE\tWHAT\tVALUE\tTARGET\tMET\n")
	}
	for i, f := range r.Figures() {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", f.ID, f.Name, f.ValueText(), f.TargetText(), strings.Trim(met(f), "*"))
		if sw != nil {
			_, _ = fmt.Fprintf(tw, "\t%s\t%s", switchedValue(sw[i]), strings.Trim(met(sw[i]), "*"))
		}
		_, _ = fmt.Fprintf(tw, "\n")
	}
	_ = tw.Flush()
	for _, w := range r.uniqueWarnings() {
		b.WriteString("warning: " + w + "\n")
	}
	return b.String()
}

// switchedFigures are the switched pass's figures, row for row with
// Figures (nil without a switched pass).
func (r *Results) switchedFigures() []Figure {
	if r.Switched == nil {
		return nil
	}
	return r.Switched.Figures()
}

// switchedValue is a switched pass's value; P4 and P5 are measured once.
func switchedValue(f Figure) string {
	if !daemonFigure(f) {
		return "(once)"
	}
	return f.ValueText()
}

// passLabel names a pass by its kernel setting and the attach mode dpd
// chose on it.
func (r *Results) passLabel() string {
	label := rcuText(r.RCU)
	if r.Attach.Mode != "" {
		label += ", attach mode " + r.Attach.Mode
	}
	return label
}

// passLine says which column holds a pass, for the text table.
func (r *Results) passLine(column string) string {
	return fmt.Sprintf("%s: %s (%s=%s)", column, r.passLabel(), rcuExpeditedFile, orDash(r.RCU))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func met(f Figure) string {
	switch {
	case !f.Measured:
		return "-"
	case f.Met():
		return "yes"
	}
	return "**no**"
}

// Markdown renders BENCHMARKS.md: the machine, the results table, how each
// figure was measured, the details behind them, the misses, and notes
// (the hand-written analysis, kept from the previous report).
func (r *Results) Markdown(notes string) string {
	var b strings.Builder
	w := func(format string, a ...any) { _, _ = fmt.Fprintf(&b, format, a...) }
	w("# dpd benchmarks\n\n")
	w("Every figure below comes from one run of `make bench` (`dpd-bench --%s`), started %s, %s in all, on Linux %s (%s)",
		r.Scale.Name, r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Elapsed.Round(time.Second), r.Machine.Kernel, r.Machine.cpuText())
	if r.Attach.Mode != "" {
		w(", dpd in attach mode %s", r.Attach.Mode)
	}
	if r.RCU != "" {
		w(" with %s", rcuText(r.RCU))
	}
	if r.Forwarding != "" {
		w(", packets between workloads by %s", r.Forwarding)
	}
	w(".")
	if sw := r.Switched; sw != nil {
		w(" The daemon phases (every figure but P4 and P5) ran again in the same run on a fresh dpd with the kernel's %s "+
			"(`%s` set to %s, put back after), where dpd's probe read a first TCX attach at %s and dpd chose attach mode %s. "+
			"Those figures are in the table's last columns.", rcuText(sw.RCU), rcuExpeditedFile, sw.RCU, sw.tcxFirstText(), orDash(sw.Attach.Mode))
	}
	w("\nThe targets are dpd's node-scale requirements. Regenerate with `make bench`; the analysis at the end is kept.\n\n")
	r.machineSection(w)

	sw := r.switchedFigures()
	w("## Results\n\n")
	if sw != nil {
		w("*value*: %s; *switched*: %s.\n\n", r.passLabel(), r.Switched.passLabel())
		w("| figure | what | value | target | met? | switched | met? |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	} else {
		w("| figure | what | value | target | met? |\n| --- | --- | --- | --- | --- |\n")
	}
	for i, f := range r.Figures() {
		w("| %s | %s | %s | %s | %s |", f.ID, f.Name, f.ValueText(), f.TargetText(), met(f))
		if sw != nil {
			w(" %s | %s |", switchedValue(sw[i]), met(sw[i]))
		}
		w("\n")
	}
	for _, warn := range r.uniqueWarnings() {
		w("\n> warning: %s\n", warn)
	}
	w("\n")
	r.kernelSection(w)
	r.methodSection(w)
	r.detailSection(w)
	if r.Switched != nil {
		w("## Details with %s\n\n", r.Switched.passLabel())
		r.Switched.daemonDetails(w)
		r.Switched.trafficDetails(w)
	}

	w("## Misses\n\n")
	var missed []string
	for i, f := range r.Figures() {
		if f.Measured && !f.Met() {
			missed = append(missed, fmt.Sprintf("* %s %s: %s against %s", f.ID, f.Name, f.ValueText(), f.TargetText()))
		}
		if sw != nil && daemonFigure(sw[i]) && sw[i].Measured && !sw[i].Met() {
			missed = append(missed, fmt.Sprintf("* %s %s, with %s: %s against %s", f.ID, f.Name, r.Switched.passLabel(), sw[i].ValueText(), sw[i].TargetText()))
		}
	}
	if len(missed) == 0 {
		w("Every measured figure meets its target.\n\n")
	} else {
		w("%s\n\nWhat limits each is explained below.\n\n", strings.Join(missed, "\n"))
	}
	w("## What limits the figures\n\n%s\n", NotesBegin)
	if notes == "" {
		notes = noNotes
	}
	w("%s\n%s\n", notes, NotesEnd)
	return b.String()
}

type writer func(format string, a ...any)

func (r *Results) machineSection(w writer) {
	m := r.Machine
	w("## Machine\n\n| | |\n| --- | --- |\n")
	w("| CPU | %s |\n| memory | %.1f GiB |\n| kernel | Linux %s (`uname -r`) |\n", m.cpuText(), float64(m.MemTotal)/(1<<30), m.Kernel)
	for _, p := range r.passes() {
		if a := p.Attach; a.Mode != "" {
			w("| attach mode%s | %s: %s |\n", p.rcuSuffix(), a.Mode, a.Reason)
		}
	}
	w("| Go | %s (driver)", m.Go)
	if v := r.Packets.GoVersion; v != "" {
		w("; benchmarks: %s", strings.TrimPrefix(v, "go version "))
	}
	w(" |\n")
	for _, p := range r.passes() {
		l := p.Load
		w("| load%s | average %s at the start; during the daemon phases dpd used %.0f %%, the driver %.0f %% and everything else "+
			"(other processes, kernel workers) %.0f %% of the machine's CPU time |\n", p.rcuSuffix(), l.LoadAvg, 100*l.DPD, 100*l.Driver, 100*l.Other)
	}
	w("\n")
}

// rcuSuffix names a pass's RCU setting after a row's name ("" unread).
func (r *Results) rcuSuffix() string {
	if r.RCU == "" {
		return ""
	}
	return ", " + rcuText(r.RCU)
}

// passes are the run's daemon passes: the kernel as found, then the
// switched one if any.
func (r *Results) passes() []*Results {
	if r.Switched != nil {
		return []*Results{r, r.Switched}
	}
	return []*Results{r}
}

func (r *Results) methodSection(w writer) {
	s, c := r.Scale, r.Cold
	w("## Method\n\n")
	w("`dpd-bench` starts the real daemon, `dpd --dataplane=linux`, with a private socket and BPF pin directory, " +
		"inside a network namespace of its own so that nothing else on the host sees its interfaces or is seen by it " +
		"(the kernel work is the same as in the root namespace). It drives dpd through the client library " +
		"(`client.Session`: snapshot, InSync, then live updates) and reads statuses from the same stream. " +
		"Workload interfaces are real veth pairs created over netlink: the host side `cali…`, which dpd programs, " +
		"and the workload side, which stays in the node namespace under a name dpd does not watch. " +
		"The node namespace has IPv6 off (dpd is IPv4-only; with IPv6 on, every veth brought up walks the whole IPv6 " +
		"routing table, a harness cost growing with the veths) and a node address on `lo` (without any address the " +
		"kernel searches every device for a route's source address on each workload route dpd adds; a real node's " +
		"eth0 answers at once). ")
	w("The %d veth pairs of P3 took %s to create (%.2f ms each).\n\n", r.Veths, r.VethTime.Round(time.Millisecond), ms(r.VethTime)/float64(max(r.Veths, 1)))
	w("* **P3, cold start.** A fresh dpd, its %d veths already present (dpd fails them closed as it starts). "+
		"One session sends the snapshot — %d IP sets × %d members, a namespace profile, %d policies (three inbound "+
		"rules, one of them on an IP set, two outbound) and %d endpoints, endpoint *i* using policy *i* in both "+
		"directions, so every endpoint compiles programs of its own — %d messages, %.1f MiB — then InSync. "+
		"P3 runs from the moment the session asks for the snapshot (just before the first message) to the arrival "+
		"of DataplaneInSync; dpd sends it after the first apply pass has programmed every endpoint.\n",
		s.Endpoints, c.IPSets, c.SetMembers, c.Policies, c.Endpoints, c.Messages, float64(c.Bytes)/(1<<20))
	w("* **P6, peak RSS.** `VmHWM` from `/proc/<pid>/status` of dpd right after P3 (every endpoint up): the " +
		"high-water mark of its resident set over the start and the cold start.\n")
	w("* **P2, policy fan-out.** The same endpoints are moved onto one shared policy (untimed; Inspect confirms they "+
		"all run one ingress program). Then one ActivePolicyUpdate changes that policy's first inbound rule from deny "+
		"to allow for TCP to port %d, once the node has gone quiet (as for P1). %d endpoints spread over the order dpd applies them in (first and last "+
		"included) are traced with `Inspect/Trace` — the attached program run on a crafted packet with "+
		"`BPF_PROG_TEST_RUN` — each by a poller of its own until it answers allow. P2 is the time from sending the "+
		"change to the last sampled flip, an upper bound: a flip shows with the next trace of its sample (dpd runs "+
		"traces one at a time under its kernel lock, 4 calls admitted at once, the rest queued); the last trace "+
		"still answering deny gives the lower bound. Afterwards Inspect must show all %d endpoints on one new program, and the stream must still "+
		"report each up. Then %d more changes turn the rule back to deny and to allow again, each once the node is quiet and "+
		"timed the same way; the second P2 row is their median, held to the 10 ms the speed issue asks for.\n", flipPort, s.TraceSample, s.Endpoints, s.FanoutChanges)
	w("* **P1, endpoint → up.** After P3's endpoints are removed and their veths deleted (every phase's veths go with its "+
		"endpoints, so the node never holds more workload interfaces than the scale) and the node has gone quiet "+
		"(dpd at most one 10 ms CPU tick, the whole machine at most three, in each of two 100 ms windows), %d new endpoints arrive one every %s, the way a "+
		"CNI plugin and a controller bring them: the veth is created, then the WorkloadEndpointUpdate is sent at "+
		"once, so dpd learns of interface and endpoint concurrently. Each latency runs from that Send to the `up` "+
		"status on the stream. Paced arrivals (50 pods/s is more than a kubelet starts) measure each endpoint's own "+
		"work rather than a queue. Two variants: every endpoint with a policy of its own (two programs compiled, "+
		"verified and loaded per endpoint) and every endpoint with the one shared policy (programs already loaded: "+
		"what a replica of a running deployment sees).\n", s.Endpoints, s.Pace)
	w("* **P4, per-packet cost.** `go test -bench` in the repository, after the daemon phases and once the machine "+
		"has gone quiet (the kernel tears the daemon's veths and programs down in its own workers), each benchmark "+
		"`-benchtime %s -count %d`, the median taken. `BPF_PROG_TEST_RUN` reports the kernel's time per run. "+
		"Established flow: `BenchmarkEntry/ct_hit` (entry program, parse, conntrack hit) over "+
		"`BenchmarkEntry/trivial` (a program that only returns TC_ACT_OK). New flows: `BenchmarkPolicy` — the "+
		"compiled policy program alone, as Calico's generated programs were measured — over its `noop` (return 0), "+
		"for N rules of one kind, the packet matching the first or the last rule. Small policies and first-rule "+
		"matches are held to Calico's cost for the same case (× noop, measured side by side with its policy "+
		"compiler) plus 10 ns, so those rows are in ns against that bound on this run's noop.\n", s.BPFBenchTime, s.BenchCount)
	w("* **P5, ingest.** `BenchmarkSyncIngest` (client.Session over a Unix socket into dpd's real server and "+
		"engine on the memory kernel) over `BenchmarkSyncIngestRaw` (the same messages into a gRPC server that "+
		"discards them), messages per second, `-benchtime %s`, in %d rounds: each round runs the two back to back, "+
		"the first of them alternating, and P5 is the median of the rounds' ratios (the machine's drift cancels out of each).\n", s.IngestBenchTime, s.BenchCount)
	w("* **P7, real traffic.** After P1, pairs of pods wired as Calico's CNI plugin wires them "+
		"(a namespace each; eth0 with /32 addresses and a default route via 169.254.1.1; the veth's host side in the node "+
		"namespace): a client and a server in dpd's node namespace on `cali` host sides that dpd programs, and a client and a server "+
		"in each of three other node namespaces, routed by plain kernel routes, with the same sysctls (proxy ARP, forwarding, strict rp_filter) "+
		"and permanent neighbour entries dpd writes. The load generator (`internal/bench/tcpload`) runs in the driver: blocking "+
		"system calls on sockets created inside each pod's namespace, the server in the server pod (one connection at a time, in the "+
		"accepting thread: a goroutine per connection made the Go scheduler part of what was measured, and with it the connection "+
		"rate a third of what it is), the client in the client pod, the driver with more Ps than threads that can block at once "+
		"(so that sysmon never takes one back from a blocked thread); "+
		"request/response is 1-byte requests over one connection (TCP_NODELAY), connection rate a new connection per "+
		"request (connect, 1 byte each way, the server closes first), each from a source address and port not used before "+
		"in the phase (so no connection meets an earlier one's conntrack entry), bulk one connection sending 128 KiB writes through fixed 8 MiB socket buffers (autotuned ones moved one path's rate more than the paths differ), "+
		"timed until the server's count of the bytes arrives. For the whole phase the driver's threads, and with them the load "+
		"generator and the softirq work of its packets, are pinned to one CPU (the machine's last), so that a case's rate is what "+
		"its packets cost that CPU rather than where the scheduler put a thread (unpinned, that moved the connection rate by ±5 %% "+
		"between runs on a two-core machine); dpd keeps every CPU. Each pair of pods has a node namespace of its own, so all "+
		"paths exist at once and none costs another anything (netfilter's connection tracking, once a ruleset needs "+
		"it, runs for every packet of its namespace): dpd's node, a plain node, an nftables node and a floor node. Cases: no dpd (the plain pods); "+
		"the floor (the plain pods with a program that only returns TC_ACT_OK on each of the four hooks dpd uses, attached as dpd attaches: what any "+
		"TC dataplane pays before its programs do anything); dpd with the namespace "+
		"allow-all profile; dpd with a policy on the server's ingress whose allowing rule is the last of %d port rules (rule *i* "+
		"denies TCP to port 10000+*i*), and separately the last of %d IP-set rules (rule *i* denies TCP to the server port "+
		"from set *i*, four addresses each; the last set holds the client's addresses); nftables enforcing the same lists on "+
		"the nftables node's pods the way Calico's nftables dataplane writes them (forward hook; `ct state established,related accept`, "+
		"`ct state invalid drop`, a jump on the server's host side to a chain with one rule per policy rule, then drop). "+
		"%s%s"+
		"Before each rule list's rounds a "+
		"connection to a port nothing listens on must be refused without a policy and dropped with one, so each case is "+
		"proven on its path. Each rule list is measured in rounds: in each, every metric is measured once per case, "+
		"%s per measurement taken in %d equal turns, the cases taking turns (so the machine's speed, which drifts over "+
		"hundreds of milliseconds, lands on every case alike), starting with a different case each round (%d rounds); "+
		"a ratio is the median over the rounds of the case against the no-dpd measurement of the same round (or, dpd "+
		"against nftables, of the two in the same round), so the load of the shared machine, which drifts, cancels out "+
		"of each ratio.\n\n",
		s.PortRules, s.SetRules, forwardingNote(r.Forwarding, r.ForwardingPeer), steadyNote(r.Traffic.Steady), s.TrafficSlice, trafficPasses, s.TrafficRounds)
}

// steadyNote describes the conntrack warm-up of P7 (trafficsteady.go).
// forwardingNote says which path dpd's pods' packets took.
func forwardingNote(f string, peer bool) string {
	switch f {
	case "redirect":
		s := "dpd passed packets between its pods from one host side straight to the other (`--workload-redirect`, " +
			"its default): they skip the node's IP stack, which every other node's packets cross"
		if peer {
			s += "; once both hooks of a flow had passed it, its packets went on straight into the destination pod's " +
				"namespace (`--workload-redirect-peer`, its default), skipping the destination host side's egress and a " +
				"backlog queue"
		}
		return s + ". "
	case "stack":
		return "dpd left packets between its pods to the node's IP stack (`--workload-redirect=false`), as on every other node. "
	}
	return ""
}

func steadyNote(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf("Before the first measurement every path opens new connections for %s, all at once (the "+
		"nftables node with its port rules), so that dpd's conntrack map is reusing the entries of expired flows, as on "+
		"a node that has served connections for longer than a closed flow's timeout (10 s; reused entries cost dpd's "+
		"programs more than a fresh map's), and netfilter's table holds the closed flows of those seconds. ", d)
}

func (r *Results) detailSection(w writer) {
	w("## Details\n\n")
	r.daemonDetails(w)
	r.packetDetails(w)
	in := r.Ingest
	w("**P5**: %.0f msgs/s through dpd, %.0f msgs/s raw gRPC (medians); ratio of each round %s.\n\n", in.Stream, in.Raw, percents(in.Ratios))
	r.trafficDetails(w)
}

// daemonDetails are the details of P1, P2, P3 and P6.
func (r *Results) daemonDetails(w writer) {
	w("**P1** per endpoint (nearest-rank quantiles; *down first*: reported `down` before `up`, i.e. dpd had the update " +
		"before it knew the interface was up; *never up*: no `up` within the wait):\n\n| variant | endpoints | policies | pace | down first | never up | min | p50 | p90 | p99 | max | removing them |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, v := range []struct {
		name string
		l    Latencies
	}{{"own policy each", r.Own}, {"shared policy", r.Shared}} {
		l := v.l
		w("| %s | %d | %d | %s | %d | %d | %s | %s | %s | %s | %s | %s |\n", v.name, l.Endpoints, l.Policies, l.Pace, l.DownFirst, l.Missing,
			quantileText(l, 0), quantileText(l, 0.5), quantileText(l, 0.9), quantileText(l, 0.99), quantileText(l, 1), fmtDur(l.Teardown))
	}
	for _, v := range []struct {
		name string
		l    Latencies
	}{{"own policy each", r.Own}, {"shared policy", r.Shared}} {
		if v.l.Missing == 0 {
			continue
		}
		w("\nP1 (%s): %d endpoints never reported up within %s of the last update; dpd's status and reason for them:\n\n",
			v.name, v.l.Missing, v.l.Waited)
		reasons := make([]string, 0, len(v.l.MissingWhy))
		for reason := range v.l.MissingWhy {
			reasons = append(reasons, reason)
		}
		slices.Sort(reasons)
		for _, reason := range reasons {
			w("* %d × `%s`\n", v.l.MissingWhy[reason], reason)
		}
	}
	f := r.Fanout
	w("\n**P2**: %d endpoints, %d sampled; trace round trip %s (median, before the change); first sampled flip %s, "+
		"last %s; the last trace still answering deny started at %s, so the last sampled endpoint to flip enforced "+
		"the change between %s and %s; every endpoint on the new program per Inspect by %s (asked after the last flip, so an upper "+
		"bound). Moving the endpoints onto the shared policy took %s.\n\n",
		f.Endpoints, f.Sampled, fmtDur(f.TraceRTT), fmtDur(f.FirstFlip), fmtDur(f.LastFlip), fmtDur(f.LastDeny),
		fmtDur(f.LastDeny), fmtDur(f.LastFlip), fmtDur(f.AllChecked), fmtDur(f.Prepare))
	if len(f.Changes) > 0 {
		ds := make([]string, len(f.Changes))
		over := 0
		for i, d := range f.Changes {
			ds[i] = fmtDur(d)
			if d > 10*time.Millisecond {
				over++
			}
		}
		w("**P2, further changes** (last sampled flip of each, in order): %s; median %s, %d of %d over 10 ms.\n\n",
			strings.Join(ds, ", "), fmtDur(f.medianChange()), over, len(f.Changes))
	}
	c := r.Cold
	w("**P3**: DataplaneInSync %s, last endpoint up %s after the first message; removing the %d endpoints later took %s.\n\n",
		fmtDur(c.InSync), fmtDur(c.AllUp), c.Endpoints, fmtDur(c.Teardown))
	w("**P6**: peak RSS %.1f MiB, RSS %.1f MiB when read.\n\n", float64(r.Memory.PeakRSS)/(1<<20), float64(r.Memory.RSS)/(1<<20))
}

func (r *Results) packetDetails(w writer) {
	p := r.Packets
	ratio := func(v, base float64) string {
		if v <= 0 || base <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f ns (%.1f×)", v, v/base)
	}
	w("**P4** entry program, ns per packet (× trivial %.0f ns): conntrack hit %s, reply %s, new flow to a deny policy "+
		"(the conntrack lookup misses, tail call) %s.\n\n", p.EntryTrivial, ratio(p.Established, p.EntryTrivial), ratio(p.Reply, p.EntryTrivial), ratio(p.EntryDeny, p.EntryTrivial))
	w("**P4** policy program, new flow, ns per packet (× noop %.0f ns):\n\n| rules | n | first rule matches | last rule matches |\n| --- | --- | --- | --- |\n", p.PolicyTrivial)
	type row struct {
		kind string
		n    int
	}
	// The required kinds and sizes always get a row ("-" where the benchmark
	// has no case); other cases the benchmark has are added.
	var rows []row
	for _, kind := range []string{"tcp-ports", "cidr32", "ipsets"} {
		for _, n := range []int{10, 100, 1000} {
			rows = append(rows, row{kind, n})
		}
	}
	rows = append(rows, row{"ipsets", 10000}, row{"ipset-shared", 10}, row{"ipset-shared", 1000}, row{"ipset-shared", 10000})
	required := len(rows)
	for k := range p.NewFlow {
		kind, rest, _ := strings.Cut(k, "/n=")
		var n int
		if _, err := fmt.Sscanf(rest, "%d/", &n); err == nil && !slices.Contains(rows, row{kind, n}) {
			rows = append(rows, row{kind, n})
		}
	}
	slices.SortStableFunc(rows[required:], func(a, b row) int {
		if a.kind != b.kind {
			return strings.Compare(a.kind, b.kind)
		}
		return a.n - b.n
	})
	for _, rw := range rows {
		key := fmt.Sprintf("%s/n=%d/", rw.kind, rw.n)
		w("| %s | %d | %s | %s |\n", rw.kind, rw.n, ratio(p.NewFlow[key+"first"], p.PolicyTrivial), ratio(p.NewFlow[key+"last"], p.PolicyTrivial))
	}
	if v6 := p.IPv6; v6 != nil {
		w("\n**P4, IPv6** entry program (× trivial %.0f ns): conntrack hit %s, reply %s, new flow to a deny policy %s. Policy program, new flow (× noop %.0f ns):",
			v6.EntryTrivial, ratio(v6.Established, v6.EntryTrivial), ratio(v6.Reply, v6.EntryTrivial), ratio(v6.EntryDeny, v6.EntryTrivial), v6.PolicyTrivial)
		keys := slices.Sorted(maps.Keys(v6.NewFlow))
		for i, k := range keys {
			sep := ","
			if i == len(keys)-1 {
				sep = "."
			}
			w(" %s %s%s", k, ratio(v6.NewFlow[k], v6.PolicyTrivial), sep)
		}
		w("\n")
	}
	w("\nRules deny, the last allows. `tcp-ports`: rule *i* matches TCP to port 10000+*i*; `cidr32`: one /32 source " +
		"each; `ipsets`: source in set *i*, one set per rule; `ipset-shared`: ports, and every rule also needs the source in one common set. " +
		"\"-\": the benchmark has no such case.\n\n")
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.2f ms", ms(d))
}

// uniqueWarnings are the warnings once each, in order, a repeated one
// with how often it came.
func (r *Results) uniqueWarnings() []string {
	count := map[string]int{}
	var order []string
	for _, w := range r.Warnings {
		if count[w] == 0 {
			order = append(order, w)
		}
		count[w]++
	}
	for i, w := range order {
		if n := count[w]; n > 1 {
			order[i] = fmt.Sprintf("%s (%d times)", w, n)
		}
	}
	return order
}

// percents lists ratios as percentages ("-" for none).
func percents(rs []float64) string {
	if len(rs) == 0 {
		return "-"
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%.1f %%", 100*r)
	}
	return strings.Join(out, ", ")
}
