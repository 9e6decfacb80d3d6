package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/linux"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/server"
	"github.com/dpd-dev/dpd/server/policysync"
)

// parseFlags reads the command line; every flag has an environment
// equivalent (DPD_ + upper snake of its name) and the flag wins.
// Usage and flag errors go to out.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (config, error) {
	c := config{goRuntime: goRuntime{MemoryLimit: memorySize{bytes: defaultMemoryLimit}, GCPercent: gcPercent{n: defaultGCPercent}}}
	var err error
	c.Config, c.Level, err = parseInto(&c.Linux, &c.goRuntime, &c.Start, args, getenv, out)
	return c, err
}

// config is everything the command line sets.
type config struct {
	server.Config
	Level slog.Level
	// Linux configures --dataplane=linux.
	Linux linux.Options
	goRuntime
	// Start holds the flags of start-up (startup.go).
	Start startFlags
}

// goRuntime are the Go runtime's settings the command line overrides.
type goRuntime struct {
	// MemoryLimit is the soft memory limit (see memoryLimit).
	MemoryLimit memorySize
	// GCPercent is GOGC (see gcTarget).
	GCPercent gcPercent
	// MaxProcs is GOMAXPROCS (see procsTarget).
	MaxProcs maxProcs
}

func parseInto(lo *linux.Options, rt *goRuntime, st *startFlags, args []string, getenv func(string) string, out io.Writer) (server.Config, slog.Level, error) {
	cfg := server.Config{
		Socket:         server.DefaultSocket,
		MetricsAddr:    server.DefaultMetricsAddr,
		MaxRecvMsgSize: server.DefaultMaxRecvMsgSize,
		Dataplane:      "linux",
	}
	level := slog.LevelInfo
	fs := flag.NewFlagSet("dpd", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		_, _ = fmt.Fprintf(out, "usage: dpd [flags]\n")
		fs.PrintDefaults()
		_, _ = fmt.Fprintf(out, "\nEvery flag can also be set by its environment variable, e.g. --tls-client-ca\nas DPD_TLS_CLIENT_CA; the flag wins.\n")
	}
	fs.StringVar(&cfg.Socket, "socket", cfg.Socket, "Unix socket for the gRPC API (mode 0600)")
	fs.StringVar(&cfg.ListenTCP, "listen-tcp", "", "also serve gRPC on host:port (needs --tls-* or --insecure-tcp)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "server certificate for --listen-tcp")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "server key for --listen-tcp")
	fs.StringVar(&cfg.TLSClientCA, "tls-client-ca", "", "CA that signs client certificates (mTLS)")
	fs.BoolVar(&cfg.InsecureTCP, "insecure-tcp", false, "serve --listen-tcp without TLS (labs only)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", cfg.MetricsAddr, "address for /metrics, /livez, /readyz (empty disables)")
	fs.StringVar(&cfg.Dataplane, "dataplane", cfg.Dataplane, "kernel dataplane: linux or memory (dry run)")
	fs.TextVar(&level, "log-level", level, "log level: debug, info, warn or error")
	fs.IntVar(&cfg.MaxRecvMsgSize, "max-msg-size", cfg.MaxRecvMsgSize, "largest gRPC message accepted, in bytes")
	fs.IntVar(&cfg.MaxPendingStatuses, "max-pending-statuses", engine.DefaultMaxPendingStatuses, "statuses a controller may leave unread (beyond one per endpoint) before dpd ends its session so that it resyncs")
	fs.StringVar(&lo.PinDir, "bpf-pin-dir", abi.PinDir, "bpffs directory for dpd's pinned maps and links (kept across restarts)")
	fs.StringVar(&lo.AttachMode, "attach-mode", tcbpf.AttachAuto, "how entry programs attach: auto (measure the kernel at start: TCX unless its first attach costs a grace period), tcx, or tc (clsact + cls_bpf)")
	redirect := fs.Bool("workload-redirect", true, "send a packet from one of this node's workloads to another straight to the destination's interface, where its ingress policy runs, skipping the host's IP stack (routing, netfilter); off routes such packets through the stack")
	peer := fs.Bool("workload-redirect-peer", true, "with --workload-redirect, deliver a packet of an established flow straight into the destination workload's namespace (bpf_redirect_peer), skipping its host-side interface's egress and a backlog queue; captures on that host-side interface then see only each flow's first packets. Off: every redirected packet leaves through the host-side interface")
	fs.BoolVar(&lo.ForceLegacyTC, "force-legacy-tc", false, "same as --attach-mode=tc (kept for existing configurations)")
	fs.StringVar(&lo.Hostname, "hostname", "", "this node's name for VXLAN tunnel endpoints when ConfigUpdate has no FelixHostname (default: the OS hostname)")
	fs.BoolVar(&cfg.FelixPipe, "felix-pipe", false, "be Felix's dataplane driver: ToDataplane on fd 3, FromDataplane on fd 4; the end of fd 3 stops dpd (exit 0)")
	fs.BoolVar(&cfg.FelixPipeExtensions, "felix-pipe-extensions", false, "in --felix-pipe mode also send DataplaneInSync and dpd's extensions (HappyEndpointsReport), which Felix's reader does not handle")
	fs.StringVar(&cfg.PolicySyncDir, "policysync-dir", "", "serve Calico's policy-sync API per workload under this directory (Felix's PolicySyncPathPrefix)")
	fs.IntVar(&cfg.PolicySyncMaxWorkloads, "policysync-max-workloads", policysync.DefaultMaxWorkloads, "most workloads --policysync-dir serves at once (each costs descriptors); further credentials files are refused, logged and counted until others go")
	fs.TextVar(&cfg.PolicySyncEncoding, "policysync-encoding", policysync.EncodingAuto, "the Felix generation --policysync-dir serves: "+policysync.Encodings+"; auto follows the controller, since a node's Dikastes comes from its Felix's release")
	fs.BoolVar(&cfg.RuleMetrics, "rule-metrics", false, "export per-rule packet and byte counters (dpd_rule_*) of the busiest rules")
	fs.StringVar(&cfg.InterfaceExclude, "interface-exclude", engine.DefaultInterfaceExclude, "interfaces host endpoints never bind, as Felix's InterfaceExclude (comma-separated names, or /regexp/); a ConfigUpdate's InterfaceExclude replaces it")
	fs.IntVar(&cfg.RuleMetricsLimit, "rule-metrics-limit", server.DefaultRuleMetricsLimit, "how many rules --rule-metrics exports, busiest first")
	flowEvents := fs.Bool("flow-events", true, "record each new flow's decision with its rule (dpdctl observe, dpd.v1.Inspect/Observe); off leaves the programs' events switched off")
	fs.IntVar(&lo.Flows.History, "flow-history", 10000, "flow events kept in memory for Observe")
	fs.DurationVar(&lo.Flows.DenyInterval, "flow-deny-interval", time.Second, "a denied flow is reported at most once per interval; the packets in between are counted into its next event")
	fs.DurationVar(&lo.Flows.ConntrackScan, "conntrack-scan-interval", linux.DefaultConntrackScan, "how often expired conntrack entries are deleted and, with --flow-events, reported as flow ends with their byte and packet counts")
	fs.BoolVar(&lo.Flows.StagedPreview, "staged-preview", false, "with --flow-events, evaluate staged policies on every packet the policy decides and report what they would have decided beside the verdict (never enforced); costs such packets a second policy evaluation")
	fs.StringVar(&cfg.FlowLog, "flow-log", "", "write flow logs (JSON lines aggregated per --flow-log-interval) to this file, or - for stdout")
	fs.DurationVar(&cfg.FlowLogInterval, "flow-log-interval", server.DefaultFlowLogInterval, "aggregation interval of --flow-log")
	fs.Var(&rt.MemoryLimit, "memory-limit", "soft memory limit of the Go runtime, which collects more often near it: a `size` as GOMEMLIMIT takes (44MiB, 1GiB), 0 or off for none; if neither this flag nor DPD_MEMORY_LIMIT is given and GOMEMLIMIT is set, GOMEMLIMIT applies; lifted with a warning if the live heap outgrows it")
	st.register(fs)
	fs.Var(&rt.GCPercent, "gc-percent", "the Go collector's GOGC: heap growth between collections in percent of the live heap, -1 for off; if neither this flag nor DPD_GC_PERCENT is given and GOGC is set, GOGC applies")
	fs.Var(&rt.MaxProcs, "max-procs", "the Go runtime's GOMAXPROCS: how many goroutines run Go code at once, 0 for twice the CPUs the runtime may use (a thread in a long kernel call holds its P, and dpd's kernel calls are long); if neither this flag nor DPD_MAX_PROCS is given and GOMAXPROCS is set, GOMAXPROCS applies")

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if actionFlags[f.Name] {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return cfg, level, envErr
	}
	if err := fs.Parse(args); err != nil {
		return cfg, level, err // already reported on out
	}
	if fs.NArg() > 0 {
		return cfg, level, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case cfg.Dataplane != "memory" && cfg.Dataplane != "linux":
		return cfg, level, fmt.Errorf("--dataplane must be linux or memory, not %q", cfg.Dataplane)
	case cfg.MaxRecvMsgSize <= 0:
		return cfg, level, fmt.Errorf("--max-msg-size must be positive")
	case cfg.MaxPendingStatuses <= 0:
		return cfg, level, fmt.Errorf("--max-pending-statuses must be positive")
	case cfg.PolicySyncMaxWorkloads <= 0:
		return cfg, level, fmt.Errorf("--policysync-max-workloads must be positive")
	case cfg.RuleMetricsLimit <= 0:
		return cfg, level, fmt.Errorf("--rule-metrics-limit must be positive")
	}
	if err := engine.ValidateInterfaceExclude(cfg.InterfaceExclude); err != nil {
		return cfg, level, fmt.Errorf("--interface-exclude: %w", err)
	}
	lo.Flows.Off = !*flowEvents
	lo.StackForwarding = !*redirect
	lo.HostSideDelivery = !*peer
	switch {
	case lo.Flows.History <= 0:
		return cfg, level, fmt.Errorf("--flow-history must be positive")
	case lo.Flows.DenyInterval <= 0:
		return cfg, level, fmt.Errorf("--flow-deny-interval must be positive")
	case lo.Flows.ConntrackScan <= 0:
		return cfg, level, fmt.Errorf("--conntrack-scan-interval must be positive")
	case cfg.FlowLogInterval <= 0:
		return cfg, level, fmt.Errorf("--flow-log-interval must be positive")
	case cfg.FlowLog != "" && lo.Flows.Off:
		return cfg, level, fmt.Errorf("--flow-log needs --flow-events")
	case lo.Flows.StagedPreview && lo.Flows.Off:
		return cfg, level, fmt.Errorf("--staged-preview needs --flow-events")
	}
	mode, err := tcbpf.ParseAttachMode(lo.AttachMode)
	if err != nil {
		return cfg, level, fmt.Errorf("--attach-mode: %w", err)
	}
	if lo.ForceLegacyTC {
		if mode == string(tcbpf.AttachTCX) {
			return cfg, level, fmt.Errorf("--force-legacy-tc contradicts --attach-mode=tcx")
		}
		mode = string(tcbpf.AttachTC)
	}
	lo.AttachMode = mode
	return cfg, level, cfg.Validate()
}

// actionFlags do something instead of configuring dpd, so they have no
// environment twin: packaging often exports DPD_VERSION for its own use.
var actionFlags = map[string]bool{"version": true, "install-to": true}

// envName maps a flag to its environment variable: tls-client-ca ->
// DPD_TLS_CLIENT_CA.
func envName(flagName string) string {
	return "DPD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
