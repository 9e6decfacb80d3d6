package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dpd-dev/dpd/client/bench"
)

// runBench measures dpd at node scale (client/bench) and prints the
// results table; --out writes BENCHMARKS.md, keeping its hand-written
// analysis.
//
// Usage: bench [--quick|--full] [--out FILE] [--dpd BIN | --socket PATH [--netns NAME]] [--src DIR] [-o json] [--quiet]
func runBench(_ *globals, args []string, w io.Writer) error {
	fs := subFlags("bench")
	quick := fs.Bool("quick", false, "reduced mode: 50 endpoints, 50 policies, 10 IP sets x 100 (under two minutes)")
	full := fs.Bool("full", false, "issue 7's scale: 1,000 endpoints, 1,000 policies, 100 IP sets x 1,000 (the default)")
	outFile := fs.String("out", "", "write the report (Markdown) to this file, keeping its hand-written analysis")
	dpd := fs.String("dpd", "", "dpd binary to start (default: dpd beside dpdctl, else in PATH)")
	socket := fs.String("socket", "", "attach to the dpd serving this socket instead of starting one (takes over its controller session)")
	netns := fs.String("netns", "", "with --socket: the named network namespace whose interfaces that dpd watches")
	src := fs.String("src", "", "dpd source tree: run the P4 and P5 go benchmarks there (needs go)")
	dpdLog := fs.String("dpd-log", "", "keep the log of the dpd the driver starts in this file")
	format := fs.String("o", "text", "output format: text or json")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := parseSub(fs, args); err != nil {
		return err
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	if *quick && *full {
		return fmt.Errorf("%w: --quick and --full are exclusive", errUsage)
	}
	if *netns != "" && *socket == "" {
		return fmt.Errorf("%w: --netns goes with --socket", errUsage)
	}
	o := bench.Options{Scale: bench.FullScale(), Socket: *socket, NetNS: *netns, SourceDir: *src, DaemonLog: *dpdLog}
	if *quick {
		o.Scale = bench.QuickScale()
	}
	if !*quiet {
		o.Progress = os.Stderr
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
		notes = bench.Notes(string(old))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, runErr := bench.Run(ctx, o)
	if res == nil {
		return runErr
	}
	if runErr != nil {
		// The report still says what was measured, and why the rest was not.
		first, _, _ := strings.Cut(runErr.Error(), "\n")
		res.Warnings = append(res.Warnings, "the run failed: "+first)
	}
	if err := writeBench(w, res, *format); err != nil {
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
			printf(os.Stderr, "wrote %s\n", *outFile)
		}
	}
	return runErr
}

func anyMeasured(res *bench.Results) bool {
	for _, f := range res.Figures() {
		if f.Measured {
			return true
		}
	}
	return false
}

func writeBench(w io.Writer, res *bench.Results, format string) error {
	if format == "text" {
		_, err := io.WriteString(w, res.Text())
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*bench.Results
		Figures []bench.Figure
	}{res, res.Figures()})
}

// findDPD resolves the daemon binary: the flag, then dpd beside this
// executable (bin/dpdctl next to bin/dpd), then PATH.
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
	return "", fmt.Errorf("%w: no dpd beside dpdctl or in PATH; give --dpd BIN or --socket PATH", errUsage)
}
