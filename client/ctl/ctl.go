package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dpd-dev/dpd/client"
)

const usage = `usage: dpdctl [global flags] COMMAND [flags]

Commands (each takes -o json for scripts):
  status               dpd's summary
  endpoints            workload endpoints with status
  endpoint ID          one endpoint: kernel state, programs, rule counters
  hostendpoints        host endpoints, the interfaces they bind, their programs
  policies             active policies and profiles
  ipsets [--id ID] [--members N]
                       IP sets with member counts (members truncated)
  services             services with frontends and backends
  routes               routes from the controller
  counters [--endpoint ID] [--nonzero]
                       per-rule packet and byte counters (--dataplane=linux)
  trace --endpoint ID --dir ingress|egress [--proto tcp|udp|icmp|N]
        [--src A] [--dst B] [--sport S] [--dport D] [--icmp-type T --icmp-code C]
                       run the endpoint's attached program on a crafted packet
                       and say which rule decides (--dataplane=linux)
  observe [--follow] [--endpoint ID] [--namespace NS] [--verdict allow|deny]
          [--policy P] [--port N] [--protocol tcp|udp|icmp|N] [--since 5m] [--last N]
                       new flows as they were decided, one line a flow, with
                       the deciding tier/policy#rule (--dataplane=linux)
  apply -f FILE        send a scenario (YAML or JSON list of ToDataplane
                       messages) as ONE controller session, then InSync, and
                       print endpoint statuses until the dataplane is in sync.
                       It takes over from the active controller: what the
                       scenario does not contain is removed.

The node-scale benchmarks are a command of their own: dpd-bench (make bench).

Global flags:
`

// exitError carries an exit code through the command functions.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// errUsage marks a command line the user must fix (exit code 2).
var errUsage = errors.New("usage")

// globals are the connection flags shared by every command.
type globals struct {
	socket, addr              string
	certFile, keyFile, caFile string
	insecure                  bool
	timeout                   time.Duration
}

// Main runs dpdctl with args (without the program name) and returns the
// exit code: 0 ok, 1 failure, 2 usage.
func Main(args []string, stdout, stderr io.Writer) int {
	var g globals
	fs := flag.NewFlagSet("dpdctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printf(stderr, "%s", usage); fs.PrintDefaults() }
	socket := os.Getenv("DPD_SOCKET")
	if socket == "" {
		socket = "/run/dpd/dpd.sock"
	}
	fs.StringVar(&g.socket, "socket", socket, "dpd's Unix socket (env DPD_SOCKET)")
	fs.StringVar(&g.addr, "addr", "", "dpd's TCP address host:port instead of the socket")
	fs.StringVar(&g.certFile, "tls-cert", "", "client certificate for --addr (mTLS)")
	fs.StringVar(&g.keyFile, "tls-key", "", "client key for --addr (mTLS)")
	fs.StringVar(&g.caFile, "tls-ca", "", "CA of dpd's server certificate for --addr")
	fs.BoolVar(&g.insecure, "insecure", false, "plaintext TCP (dpd --insecure-tcp)")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "connect and request timeout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cmds := map[string]func(*globals, []string, io.Writer) error{
		"status":        runStatus,
		"endpoints":     runEndpoints,
		"endpoint":      runEndpoint,
		"hostendpoints": runHostEndpoints,
		"policies":      runPolicies,
		"ipsets":        runIPSets,
		"services":      runServices,
		"routes":        runRoutes,
		"counters":      runCounters,
		"trace":         runTrace,
		"observe":       runObserve,
		"apply":         runApply,
	}
	cmd, ok := cmds[fs.Arg(0)]
	if !ok {
		printf(stderr, "dpdctl: unknown command %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	err := cmd(&g, fs.Args()[1:], stdout)
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		printf(stderr, "dpdctl %s: %v\n", fs.Arg(0), err)
		return 2
	case errors.As(err, &ee):
		printf(stderr, "dpdctl %s: %v\n", fs.Arg(0), ee.err)
		return ee.code
	}
	printf(stderr, "dpdctl %s: %v\n", fs.Arg(0), err)
	return 1
}

// printf writes best effort: a closed stdout or stderr is no reason for a
// failure of its own.
func printf(w io.Writer, format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }

// dial connects per the global flags.
func (g *globals) dial(ctx context.Context) (*client.Client, error) {
	if g.addr == "" {
		return client.Dial(ctx, g.socket)
	}
	var opts []client.Option
	if g.insecure {
		opts = append(opts, client.WithInsecure())
	}
	if g.certFile != "" || g.keyFile != "" || g.caFile != "" {
		opts = append(opts, client.WithTLS(g.certFile, g.keyFile, g.caFile))
	}
	return client.Dial(ctx, g.addr, opts...)
}

// subFlags is a command's flag set, writing errors to out's caller.
func subFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("dpdctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseSub parses a command's flags, mapping failures to usage errors.
func parseSub(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fs.PrintDefaults()
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	return nil
}
