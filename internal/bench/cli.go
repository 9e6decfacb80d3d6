package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

const usage = `usage: dpd-bench [--quick|--full] [--out FILE] [--dpd BIN [--dpd-arg FLAG]... | --socket PATH [--netns NAME]]
                 [--src DIR] [--dpd-log FILE] [-o text|json] [--quiet] [--switch-rcu=false]
                 [--only-traffic [--traffic-metrics LIST] [--traffic-bpf-stats]]
                 [--traffic-rounds N] [--traffic-slice D]

Measures dpd's node-scale figures (P1-P7) against a real dpd it starts in a
network namespace of its own (root, --dataplane=linux), prints them, and with
--out writes BENCHMARKS.md, keeping its hand-written analysis.

Flags:
`

// errUsage marks a command line the user must fix (exit code 2).
var errUsage = errors.New("usage")

// Main runs dpd-bench with args (without the program name) and returns the
// exit code: 0 ok, 1 failure, 2 usage.
func Main(args []string, stdout, stderr io.Writer) int {
	err := runMain(args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		printf(stderr, "dpd-bench: %v\n", err)
		return 2
	}
	printf(stderr, "dpd-bench: %v\n", err)
	return 1
}

func runMain(args []string, w, stderr io.Writer) error {
	fs := flag.NewFlagSet("dpd-bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	quick := fs.Bool("quick", false, "reduced mode: 50 endpoints, 50 policies, 10 IP sets x 100 (under two minutes)")
	full := fs.Bool("full", false, "node scale: 1,000 endpoints, 1,000 policies, 100 IP sets x 1,000 (the default)")
	outFile := fs.String("out", "", "write the report (Markdown) to this file, keeping its hand-written analysis")
	dpd := fs.String("dpd", "", "dpd binary to start (default: dpd beside dpd-bench, else in PATH)")
	socket := fs.String("socket", "", "attach to the dpd serving this socket instead of starting one (takes over its controller session)")
	netns := fs.String("netns", "", "with --socket: the named network namespace whose interfaces that dpd watches")
	src := fs.String("src", "", "dpd source tree: run the P4 and P5 go benchmarks there (needs go)")
	dpdLog := fs.String("dpd-log", "", "keep the log of the dpd the driver starts in this file")
	format := fs.String("o", "text", "output format: text or json")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	onlyTraffic := fs.Bool("only-traffic", false, "measure P7 (real traffic) alone, on a fresh daemon; not with --out")
	noTraffic := fs.Bool("no-traffic", false, "leave P7 (real traffic) out: P1, P2, P3 and P6 in about a minute; not with --out")
	trafficRounds := fs.Int("traffic-rounds", 0, "P7 rounds per rule list (0: the scale's)")
	trafficSlice := fs.Duration("traffic-slice", 0, "length of one P7 measurement (0: the scale's)")
	trafficBPFStats := fs.Bool("traffic-bpf-stats", false, "with --only-traffic: report the run time of dpd's entry programs per new connection (kernel BPF statistics, on for the run; they slow dpd's path slightly)")
	switchRCU := fs.Bool("switch-rcu", true, "also measure the daemon phases (all but P4, P5) with the kernel's RCU grace periods switched "+
		"(/sys/kernel/rcu_expedited, put back after): a TCX attach waits for one, so this is the other kind of kernel, TCX cheap or slow")
	trafficMetrics := fs.String("traffic-metrics", "", "with --only-traffic: the P7 metrics to measure, comma-separated (rr, crr, bulk; default all)")
	var dpdArgs []string
	fs.Func("dpd-arg", "one more flag for the dpd the driver starts, e.g. --dpd-arg=--attach-mode=tcx (repeatable)", func(v string) error {
		dpdArgs = append(dpdArgs, v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printf(stderr, "%s", usage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	case *format != "text" && *format != "json":
		return fmt.Errorf("%w: -o must be text or json", errUsage)
	case *quick && *full:
		return fmt.Errorf("%w: --quick and --full are exclusive", errUsage)
	case *netns != "" && *socket == "":
		return fmt.Errorf("%w: --netns goes with --socket", errUsage)
	case len(dpdArgs) > 0 && *socket != "":
		return fmt.Errorf("%w: --dpd-arg goes with a dpd the driver starts, not --socket", errUsage)
	case *onlyTraffic && *outFile != "":
		return fmt.Errorf("%w: --only-traffic measures one figure: no report to write with --out", errUsage)
	case *noTraffic && (*outFile != "" || *onlyTraffic):
		return fmt.Errorf("%w: --no-traffic goes with neither --out nor --only-traffic", errUsage)
	case (*trafficMetrics != "" || *trafficBPFStats) && !*onlyTraffic:
		return fmt.Errorf("%w: --traffic-metrics and --traffic-bpf-stats go with --only-traffic", errUsage)
	case *trafficRounds < 0 || *trafficSlice < 0:
		return fmt.Errorf("%w: --traffic-rounds and --traffic-slice must not be negative", errUsage)
	}
	o := Options{Scale: FullScale(), Socket: *socket, NetNS: *netns, SourceDir: *src, DaemonLog: *dpdLog,
		DaemonArgs: dpdArgs, OnlyTraffic: *onlyTraffic, NoTraffic: *noTraffic, TrafficBPFStats: *trafficBPFStats, SwitchRCU: *switchRCU}
	if *quick {
		o.Scale = QuickScale()
	}
	if *trafficMetrics != "" {
		for _, m := range strings.Split(*trafficMetrics, ",") {
			if !slices.Contains(trafficMetricNames[:], m) {
				return fmt.Errorf("%w: --traffic-metrics: no metric %q (rr, crr, bulk)", errUsage, m)
			}
			o.TrafficMetrics = append(o.TrafficMetrics, m)
		}
	}
	if *trafficRounds > 0 {
		o.Scale.TrafficRounds = *trafficRounds
	}
	if *trafficSlice > 0 {
		o.Scale.TrafficSlice = *trafficSlice
	}
	if !*quiet {
		o.Progress = stderr
	}
	if o.Socket == "" {
		bin, err := findDPD(*dpd)
		if err != nil {
			return err
		}
		o.DPD = bin
	}
	var notes string
	if *outFile != "" {
		old, err := os.ReadFile(*outFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("read %s: %w", *outFile, err)
		}
		notes = Notes(string(old))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, runErr := Run(ctx, o)
	if res == nil {
		return runErr
	}
	if runErr != nil {
		// The report still says what was measured, and why the rest was not.
		first, _, _ := strings.Cut(runErr.Error(), "\n")
		res.Warnings = append(res.Warnings, "the run failed: "+first)
	}
	if err := writeResults(w, res, *format); err != nil {
		return err
	}
	switch {
	case *outFile == "":
	case ctx.Err() != nil:
		runErr = fmt.Errorf("%w (interrupted: no report written)", runErr)
	case runErr != nil && !anyMeasured(res):
		runErr = fmt.Errorf("%w (nothing measured: no report written)", runErr)
	default:
		if err := os.WriteFile(*outFile, []byte(res.Markdown(notes)), 0o644); err != nil {
			return errors.Join(runErr, fmt.Errorf("write report: %w", err))
		}
		if !*quiet {
			printf(stderr, "wrote %s\n", *outFile)
		}
	}
	return runErr
}

func anyMeasured(res *Results) bool {
	for _, f := range res.Figures() {
		if f.Measured {
			return true
		}
	}
	return false
}

func writeResults(w io.Writer, res *Results, format string) error {
	if format == "text" {
		_, err := io.WriteString(w, res.Text())
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*Results
		Figures         []Figure
		SwitchedFigures []Figure `json:",omitempty"`
	}{res, res.Figures(), res.switchedFigures()})
}

// findDPD resolves the daemon binary: the flag, then dpd beside this
// executable (bin/dpd-bench next to bin/dpd), then PATH.
func findDPD(flagValue string) (string, error) {
	if flagValue != "" {
		return filepath.Abs(flagValue)
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "dpd")
		if st, err := os.Stat(beside); err == nil && st.Mode().IsRegular() {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("dpd"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: no dpd beside dpd-bench or in PATH; give --dpd BIN or --socket PATH", errUsage)
}

// printf writes best effort: a closed stdout or stderr is no reason for a
// failure of its own.
func printf(w io.Writer, format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }
