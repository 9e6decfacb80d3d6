package server

import (
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/dpd-dev/dpd/server/policysync"
)

// Defaults for Config's zero values.
const (
	DefaultSocket         = "/run/dpd/dpd.sock"
	DefaultMetricsAddr    = "127.0.0.1:9091"
	DefaultMaxRecvMsgSize = 16 << 20
	DefaultDrainTimeout   = 5 * time.Second
	// DefaultRuleMetricsLimit is how many rules --rule-metrics exports.
	DefaultRuleMetricsLimit = 100
)

// Config is what the daemon needs; cmd/dpd fills it from flags.
type Config struct {
	// Socket is the Unix socket path (created with mode 0600).
	Socket string
	// ListenTCP, when set, also serves on this host:port: with mTLS
	// (TLSCert, TLSKey, TLSClientCA) unless InsecureTCP.
	ListenTCP                    string
	TLSCert, TLSKey, TLSClientCA string
	InsecureTCP                  bool
	// MetricsAddr serves /metrics, /livez and /readyz; "" disables it.
	MetricsAddr string
	// MaxRecvMsgSize bounds one incoming gRPC message.
	MaxRecvMsgSize int
	// Dataplane names the kernel ("memory" or "linux") for status.
	Dataplane string
	// MaxPendingStatuses caps the statuses waiting for a controller that
	// does not read them (0: the engine's default); past it the session
	// ends (engine.Options.MaxPendingStatuses).
	MaxPendingStatuses int
	// InterfaceExclude is engine.Options.InterfaceExclude: the interfaces
	// host endpoints never bind until a ConfigUpdate says otherwise.
	InterfaceExclude string
	// Version is reported by Inspect/GetStatus.
	Version string
	// DrainTimeout bounds the graceful stop of the gRPC servers.
	DrainTimeout time.Duration
	Log          *slog.Logger

	// FelixPipe makes dpd Felix's dataplane driver: ToDataplane frames
	// arrive on fd 3, FromDataplane frames leave on fd 4 (PipeIn/PipeOut
	// replace the fds in tests). The end of fd 3 stops dpd cleanly.
	FelixPipe bool
	// FelixPipeExtensions also sends Felix what its reader does not handle
	// (DataplaneInSync, HappyEndpointsReport); off, Felix gets only what it
	// reads.
	FelixPipeExtensions bool
	PipeIn              io.ReadCloser
	PipeOut             io.WriteCloser
	// PolicySyncDir, when set, serves felix.PolicySync per workload under
	// it (Felix's PolicySyncPathPrefix: creds/<uid>.json -> mount/<uid>/socket).
	PolicySyncDir string
	// PolicySyncMaxWorkloads caps the workloads served under PolicySyncDir
	// (0: policysync.DefaultMaxWorkloads); further credentials files are
	// refused until others go.
	PolicySyncMaxWorkloads int
	// PolicySyncEncoding is the Felix generation policy-sync clients are
	// served in (default: the controller's).
	PolicySyncEncoding policysync.Encoding
	// RuleMetrics exports per-rule packet and byte counters of the
	// RuleMetricsLimit busiest rules (linux dataplane).
	RuleMetrics      bool
	RuleMetricsLimit int
	// FlowLog, when set, writes flow logs (aggregates of the kernel's flow
	// events per FlowLogInterval) as JSON lines to this file, or to stdout
	// for "-" (linux dataplane).
	FlowLog         string
	FlowLogInterval time.Duration
	// StagedPreview has the engine resolve staged previews for kernels
	// that run them (the linux kernel's FlowOptions.StagedPreview).
	StagedPreview bool
}

// withDefaults fills zero values.
func (c Config) withDefaults() Config {
	if c.MaxRecvMsgSize <= 0 {
		c.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.RuleMetricsLimit <= 0 {
		c.RuleMetricsLimit = DefaultRuleMetricsLimit
	}
	return c
}

// Validate reports contradictory settings before anything listens.
func (c Config) Validate() error {
	if c.Socket == "" && c.ListenTCP == "" {
		return errors.New("nothing to listen on: set --socket or --listen-tcp")
	}
	tlsSet := c.TLSCert != "" || c.TLSKey != "" || c.TLSClientCA != ""
	switch {
	case c.ListenTCP == "" && (tlsSet || c.InsecureTCP):
		return errors.New("--tls-* and --insecure-tcp need --listen-tcp")
	case c.ListenTCP != "" && c.InsecureTCP && tlsSet:
		return errors.New("--insecure-tcp and --tls-* are exclusive")
	case c.ListenTCP != "" && !c.InsecureTCP && (c.TLSCert == "" || c.TLSKey == "" || c.TLSClientCA == ""):
		return errors.New("--listen-tcp needs --tls-cert, --tls-key and --tls-client-ca (mTLS), or --insecure-tcp")
	}
	return nil
}
