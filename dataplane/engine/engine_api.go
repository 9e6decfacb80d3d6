package engine

// This file fixes the engine's API for the server, the CLI and tests; the
// signatures are the contract. The bodies live in engine.go, session.go and
// snapshot.go.

import (
	"context"
	"log/slog"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures an Engine. Zero values get the documented defaults.
type Options struct {
	Kernel Kernel
	// Name of the dataplane for status ("memory" or "linux").
	Name string
	Log  *slog.Logger
	// Registry receives the engine's dpd_* metrics; nil means none.
	Registry prometheus.Registerer
	// InboxSize bounds the inbox (default 1024). A full inbox blocks the
	// sender: backpressure, never drops.
	InboxSize int
	// MaxBatch is how many messages one loop iteration drains (default 100).
	MaxBatch int
	// ApplyInterval and ApplyBurst form the token bucket that throttles
	// applies (default: 100 applies/s, burst 10).
	ApplyInterval time.Duration
	ApplyBurst    int
	// RetryMin/RetryMax bound the backoff after a failed apply (default
	// 50 ms .. 30 s).
	RetryMin, RetryMax time.Duration
	// ResyncInterval forces a full resync to repair drift (default 5 min).
	ResyncInterval time.Duration
	// MaxPendingStatuses caps the statuses waiting for a session's reader
	// beyond one per endpoint the engine knows (DefaultMaxPendingStatuses). Unread
	// statuses coalesce to one per endpoint, host endpoint, heartbeat and
	// happy report, so only a reader that stays behind while endpoints
	// come and go reaches the cap; its session then ends with
	// ErrControllerBehind.
	MaxPendingStatuses int
	// HeartbeatFirst is the delay of the first ProcessStatusUpdate (default
	// 1 s, at most 10 s); later ones follow ReportingIntervalSecs (default 30).
	HeartbeatFirst time.Duration
	Now            func() time.Time
	// InterfaceExclude lists the interfaces host endpoints never bind, as
	// Felix's InterfaceExclude (names, or regular expressions between
	// slashes), until a ConfigUpdate carries InterfaceExclude. Empty:
	// DefaultInterfaceExclude. Invalid: New panics (check it with
	// ValidateInterfaceExclude).
	InterfaceExclude string
	// StagedPreview resolves, for every endpoint direction with staged
	// policies, a preview policy with them enforced (model.Endpoint's
	// Preview fields), for kernels that report what they would decide.
	StagedPreview bool
}

// ValidateInterfaceExclude checks an InterfaceExclude value.
func ValidateInterfaceExclude(s string) error {
	_, err := parseIfaceMatcher(s)
	return err
}

// DefaultMaxPendingStatuses is Options.MaxPendingStatuses when unset.
const DefaultMaxPendingStatuses = 16384

// EndpointInfo is the engine's view of one workload endpoint, for Inspect.
type EndpointInfo struct {
	ID             model.WorkloadID
	Iface          string
	Status         string // "up", "down", "error"
	Reason         string
	LastProgrammed time.Time
	IPv4Nets       []string
	IPv6Nets       []string
	ProfileIDs     []string
	Tiers          []string
	Dirty          bool
}

// StatusInfo is the engine's summary, for Inspect GetStatus.
type StatusInfo struct {
	Dataplane                           string
	SessionID                           uint64
	SessionPeer                         string
	SessionSince                        time.Time
	Connected                           bool
	ControllerInSync                    bool
	DataplaneInSync                     bool
	MessagesReceived                    uint64
	InvalidMessages                     uint64
	Endpoints, Up, Down, Errored, Dirty int
	Policies, Profiles, IPSets, Routes  int
	Services, HostEndpoints             int
	LastApply                           time.Time
	LastApplyError                      string
}

// Session is one controller connection's view of the engine: messages in,
// status out. A slow reader never stalls the engine.
type Session interface {
	// ID is unique per engine lifetime.
	ID() uint64
	// Submit queues an update the server translated; it blocks while the
	// inbox is full and returns ctx.Err() if ctx ends first.
	Submit(ctx context.Context, u model.Update) error
	// Reject records a message that failed translation: it is counted, and
	// the endpoint it names (if any) goes to status "error" with its reason.
	Reject(ctx context.Context, r model.Rejection) error
	// Out carries the session's statuses (see Status), closed when the
	// session ends. Unread statuses of one subject coalesce to the latest.
	Out() <-chan Status
	// Err reports why the engine ended the session: nil while it is open
	// or after Close, else an error wrapping ErrControllerBehind (the
	// reader fell behind past Options.MaxPendingStatuses).
	Err() error
	// Done is closed when the session has ended: Close, the engine
	// stopping, or the engine ending it (see Err).
	Done() <-chan struct{}
	// Close ends the session. The dataplane keeps enforcing the last state.
	Close()
}
