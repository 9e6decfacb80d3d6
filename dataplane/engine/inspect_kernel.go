package engine

// The kernel's side of Inspect: what only the kernel knows (what is
// attached where, the counter tables of the installed programs, a trace
// through the real program, counters, map fill levels). The server asks
// through these interfaces, in model types, and never sees a kernel type,
// so a datapath handle never escapes the kernel's own lock.

import (
	"errors"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// ErrNotProgrammed is a trace of an interface the kernel has not attached
// its programs to (absent, or not yet programmed).
var ErrNotProgrammed = errors.New("interface is absent or not yet attached")

// EndpointInspector is what every kernel can say of the interfaces it
// programs (the memory kernel included). Methods are safe to call
// concurrently with the engine's apply loop and return copies.
type EndpointInspector interface {
	// EndpointDetails returns what is programmed on iface; false when the
	// kernel holds nothing for it.
	EndpointDetails(iface string) (model.EndpointDetails, bool)
	// Rules returns the counter table of the program installed for iface's
	// direction, in evaluation order; false when none is installed.
	Rules(iface string, dir model.Direction) ([]model.RuleInfo, bool)
}

// KernelInspector is implemented by kernels that run real programs: a
// kernel without it answers no trace, counter or map question.
type KernelInspector interface {
	EndpointInspector
	// Trace runs the program attached for iface's direction on frame (an
	// Ethernet frame) without side effects on conntrack or counters;
	// ErrNotProgrammed when iface has no programs.
	Trace(iface string, dir model.Direction, frame []byte) (model.TraceResult, error)
	// ReadCounter sums a rule counter.
	ReadCounter(id uint64) (model.RuleCounter, error)
	// MapUsage reports the fill level of the kernel's maps. It is called on
	// every metrics scrape, so it must be cheap. Maps that could not be
	// counted are left out and named in the error.
	MapUsage() ([]model.MapUsage, error)
	// ConntrackEntries counts the connection tracking entries (a recent
	// count: it may be cached for a short interval).
	ConntrackEntries() (int, error)
	// AttachInfo says how entry programs are attached and why.
	AttachInfo() model.AttachInfo
}

// DropInspector is implemented by kernels whose datapath counts the packets
// it drops for reasons no rule counts. Optional: callers type-assert it. It
// is called on every metrics scrape, so it must be cheap.
type DropInspector interface {
	Drops() ([]model.DropCount, error)
}

// ForwardingInspector is implemented by kernels that choose how packets
// between the node's workloads travel. Optional: callers type-assert it.
type ForwardingInspector interface {
	// WorkloadForwarding is "redirect" (straight from one workload's
	// host-side interface to the other's) or "stack" (routed by the host).
	WorkloadForwarding() string
	// WorkloadRedirectPeer: with "redirect", an established flow's
	// packets go straight into the destination workload's namespace,
	// past its host-side interface.
	WorkloadRedirectPeer() bool
}
