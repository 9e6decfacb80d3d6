package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/dpd-dev/dpd/internal/daemontest"
)

// P4 and P5 come from the repository's benchmarks, run with `go test` in
// Options.SourceDir after the daemon phases (so they have the machine to
// themselves) and parsed here:
//
//	P4  ./dataplane/tcbpf          BenchmarkEntry   trivial, ct_hit, ct_reply, policy_deny (ns/pkt)
//	P4  ./dataplane/tcbpf/polprog  BenchmarkPolicy  noop, <kind>/n=<rules>/<first|last> (ns/op)
//	P4  the same for IPv6: BenchmarkEntry6, BenchmarkPolicy6
//	P5  ./server                 BenchmarkSyncIngest, BenchmarkSyncIngestRaw (msgs/s), in alternating rounds
type goBench struct {
	pkg, pattern, benchtime string
}

// benchResults maps a benchmark name without its -GOMAXPROCS suffix to one
// map of metrics (unit -> value) per run.
type benchResults map[string][]map[string]float64

// procSuffix is the "-2" go test appends for GOMAXPROCS.
var procSuffix = regexp.MustCompile(`-\d+$`)

// parseBench reads `go test -bench` output: "BenchmarkX/sub-2  N  v1 unit1  v2 unit2 ...".
func parseBench(out string) benchResults {
	res := benchResults{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		m := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			m[f[i+1]] = v
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		res[name] = append(res[name], m)
	}
	return res
}

// median is the median of a metric over the runs of name (0 if absent).
func (b benchResults) median(name, unit string) float64 {
	var vs []float64
	for _, m := range b[name] {
		if v, ok := m[unit]; ok {
			vs = append(vs, v)
		}
	}
	return medianOf(vs)
}

// goCommand finds the go command: the option, else PATH or $GOROOT/bin.
func goCommand(opt string) (string, error) {
	if opt != "" {
		return opt, nil
	}
	p, err := daemontest.GoCommand()
	if err != nil {
		return "", fmt.Errorf("%w: P4 and P5 need it", err)
	}
	return p, nil
}

// runGoBench runs one benchmark set and returns its parsed output.
func runGoBench(ctx context.Context, goBin, dir string, b goBench, count int) (benchResults, error) {
	args := []string{"test", "-run", "^$", "-bench", b.pattern, "-benchtime", b.benchtime,
		"-count", strconv.Itoa(count), b.pkg}
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	// The figures are about dpd, not the race detector or a coverage build.
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 40))
	}
	res := parseBench(string(out))
	if len(res) == 0 {
		return nil, fmt.Errorf("go %s printed no benchmark results:\n%s", strings.Join(args, " "), tail(string(out), 40))
	}
	return res, nil
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// goBenchmarks runs P4 and P5.
func (r *runner) goBenchmarks(ctx context.Context) error {
	goBin, err := goCommand(r.o.GoBinary)
	if err != nil {
		return err
	}
	s := r.o.Scale
	if out, err := exec.CommandContext(ctx, goBin, "version").Output(); err == nil {
		r.res.Packets.GoVersion = strings.TrimSpace(string(out))
	}
	sets := []goBench{
		{pkg: "./dataplane/tcbpf/", pattern: "^BenchmarkEntry$", benchtime: s.BPFBenchTime},
		{pkg: "./dataplane/tcbpf/polprog/", pattern: "^BenchmarkPolicy$", benchtime: s.BPFBenchTime},
		{pkg: "./dataplane/tcbpf/", pattern: "^BenchmarkEntry6$", benchtime: s.BPFBenchTime},
		{pkg: "./dataplane/tcbpf/polprog/", pattern: "^BenchmarkPolicy6$", benchtime: s.BPFBenchTime},
	}
	all := benchResults{}
	for _, b := range sets {
		r.awaitIdle(ctx, 0, time.Minute)
		r.progress("P4/P5: go test -bench '%s' -benchtime %s -count %d %s", b.pattern, b.benchtime, s.BenchCount, b.pkg)
		res, err := runGoBench(ctx, goBin, r.o.SourceDir, b, s.BenchCount)
		if err != nil {
			return err
		}
		for k, v := range res {
			all[k] = v
		}
	}
	r.res.Packets = packetCost(all, r.res.Packets.GoVersion)
	r.awaitIdle(ctx, 0, time.Minute)
	r.res.Ingest, err = r.ingest(ctx, goBin)
	return err
}

// ingestBenches are P5's two benchmarks: dpd's server and engine, and the
// raw gRPC floor.
var ingestBenches = [2]goBench{
	{pkg: "./server/", pattern: "^BenchmarkSyncIngest$"},
	{pkg: "./server/", pattern: "^BenchmarkSyncIngestRaw$"},
}

// ingest is P5 in rounds: each round runs both benchmarks once, back to
// back, the first of them alternating, and P5 is the median of the
// rounds' ratios. Run one after the other (-count on each) the ratio moved
// with the machine between them: 53.9 % in one run where alternating
// read 72.4 %.
func (r *runner) ingest(ctx context.Context, goBin string) (Ingest, error) {
	s := r.o.Scale
	var in Ingest
	var streams, raws []float64
	for round := range s.BenchCount {
		var rate [2]float64
		for j := range 2 {
			b := ingestBenches[(round+j)%2]
			b.benchtime = s.IngestBenchTime
			r.progress("P5 round %d: go test -bench '%s' -benchtime %s %s", round+1, b.pattern, b.benchtime, b.pkg)
			res, err := runGoBench(ctx, goBin, r.o.SourceDir, b, 1)
			if err != nil {
				return in, err
			}
			rate[(round+j)%2] = res.median(strings.TrimSuffix(strings.TrimPrefix(b.pattern, "^"), "$"), "msgs/s")
		}
		if rate[0] <= 0 || rate[1] <= 0 {
			r.warn("P5 round %d: a benchmark reported no msgs/s; the round is left out", round+1)
			continue
		}
		streams, raws = append(streams, rate[0]), append(raws, rate[1])
		in.Ratios = append(in.Ratios, rate[0]/rate[1])
	}
	in.Stream, in.Raw = medianOf(streams), medianOf(raws)
	return in, nil
}

// packetCost picks P4's numbers out of the benchmark results.
func packetCost(all benchResults, goVersion string) PacketCost {
	p := packetCostOf(all, "")
	p.GoVersion = goVersion
	if v6 := packetCostOf(all, "6"); v6.EntryTrivial > 0 || len(v6.NewFlow) > 0 {
		p.IPv6 = &v6
	}
	return p
}

// packetCostOf reads BenchmarkEntry<suffix> and BenchmarkPolicy<suffix>.
func packetCostOf(all benchResults, suffix string) PacketCost {
	entry, policy := "BenchmarkEntry"+suffix+"/", "BenchmarkPolicy"+suffix+"/"
	p := PacketCost{
		EntryTrivial:  all.median(entry+"trivial", "ns/pkt"),
		Established:   all.median(entry+"ct_hit", "ns/pkt"),
		Reply:         all.median(entry+"ct_reply", "ns/pkt"),
		EntryDeny:     all.median(entry+"policy_deny", "ns/pkt"),
		PolicyTrivial: all.median(policy+"noop", "ns/op"),
		NewFlow:       map[string]float64{},
	}
	for name := range all {
		if c, ok := strings.CutPrefix(name, policy); ok && c != "noop" {
			p.NewFlow[c] = all.median(name, "ns/op")
		}
	}
	return p
}
