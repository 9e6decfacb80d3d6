package model

// What a kernel reports to Inspect (engine.EndpointInspector and
// engine.KernelInspector): plain values, copied out of the kernel.

import "time"

// EndpointDetails is the kernel's view of one programmed interface.
type EndpointDetails struct {
	Ifindex        int
	AttachMode     string // "tcx", "tc", or what the kernel calls its own
	IngressProgram string // the installed program of each direction, "" for none
	EgressProgram  string
	Ready          bool // policy installed: traffic is policed, not dropped
	LastProgrammed time.Time
}

// Synthetic rule entries: what decides when no rule of a policy did.
const (
	SyntheticTierDefault = "tier-default" // a tier's default action
	SyntheticNoMatch     = "no-match"     // nothing matched: drop
)

// RuleInfo describes one counter of an installed program.
type RuleInfo struct {
	CounterID uint64
	Tier      string // "" for profiles and no-match
	Policy    string // policy or profile name; "" for synthetic entries
	Kind      string // "policy", "profile"; "" for synthetic entries
	Index     int    // rule index in its policy; -1 for synthetic entries
	RuleID    string
	Action    Action
	Synthetic string // SyntheticTierDefault, SyntheticNoMatch or ""
}

// RuleCounter is what a rule counter counted.
type RuleCounter struct {
	Packets, Bytes uint64
}

// TraceStage is how far a traced packet got.
type TraceStage uint8

const (
	// TraceNotReady: the interface is attached but not yet policed, so the
	// packet was dropped before policy.
	TraceNotReady TraceStage = iota
	// TraceNoBackend: the destination is a service frontend without a
	// ready backend.
	TraceNoBackend
	// TraceNoPolicy: no policy program is installed for the direction.
	TraceNoPolicy
	// TraceIncomplete: the policy program dropped the packet before it
	// decided (a missing program chunk).
	TraceIncomplete
	// TraceDecided: the policy decided; Allowed and Rule say how.
	TraceDecided
)

// TraceResult is the outcome of a trace run.
type TraceResult struct {
	Ifindex int // the interface the packet was run on
	Return  int // the program's return code (TC_ACT_*)
	Stage   TraceStage
	// Allowed is the policy verdict (TraceDecided only).
	Allowed bool
	// RuleID is the counter id of the deciding rule, 0 for none; Rule is
	// its entry in the installed program's table, read with the run, and
	// RuleFound false when the table has no such id.
	RuleID    uint64
	Rule      RuleInfo
	RuleFound bool
	// Conntrack is "established", "reply" or "related" when the packet
	// belongs to a tracked flow (which the program would pass whatever
	// the policy says), "" otherwise.
	Conntrack string
	// Exempt names why the program passes the packet without policy
	// ("neighbour discovery": ICMPv6 ND or MLD; "failsafe port" on a host
	// interface), "" otherwise.
	Exempt string
	// Host: the interface is a host endpoint's, which is never failed
	// closed: TraceNotReady means unpoliced and TraceNoPolicy passes.
	Host bool
}

// DropCount is how many packets the datapath dropped for one reason that no
// rule counts (a fragment without its first piece, ...), since the maps
// were created.
type DropCount struct {
	Reason         string // a metric label: "fragment_without_first", ...
	Packets, Bytes uint64
}

// MapUsage is one map's fill level.
type MapUsage struct {
	Name              string
	Entries, Capacity int
	Conntrack         bool // the conntrack map: its entries are the tracked flows
}

// AttachInfo is how a kernel attaches entry programs, why, and what the
// attach-relevant kernel operations cost where it runs.
type AttachInfo struct {
	Mode   string // "tcx" or "tc"
	Reason string
	Costs  []KernelCost
}

// KernelCost is one kernel operation's cost: as the start-up probe measured
// it (0 when the mode was forced) and as observed on real operations.
type KernelCost struct {
	Op            string
	Probe         time.Duration
	ObservedMean  time.Duration
	ObservedCount uint64
}
