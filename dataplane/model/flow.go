package model

import (
	"net/netip"
	"time"
)

// FlowEvent is one new flow's decision as the dataplane reported it (at
// most once per flow and interval for denied flows). It speaks Trace's
// vocabulary: Stage (TraceDecided or TraceNoPolicy), Allowed, and the
// deciding rule as a RuleInfo read from the installed program's table when
// the event was read.
type FlowEvent struct {
	// Seq numbers the events a kernel recorded, from 1, without gaps.
	Seq       uint64
	Time      time.Time
	Iface     string // the host-side interface; "" when no endpoint has it now
	Ifindex   int
	Direction Direction
	Proto     uint8
	// Src and Dst as policed: for service traffic, Dst is the backend.
	Src, Dst           netip.AddrPort
	ICMPType, ICMPCode uint8
	Stage              TraceStage
	Allowed            bool
	RuleID             uint64
	Rule               RuleInfo
	RuleFound          bool
	// Suppressed counts the flow's denied packets not reported since its
	// previous event (rate limiting).
	Suppressed uint32
	// Frontend is the service address the client used before DNAT; the
	// zero value for non-service traffic.
	Frontend netip.AddrPort
	// Lost, on an event delivered to a subscriber, counts the events the
	// subscriber missed right before it (it was too slow).
	Lost uint64
	// End marks an allowed flow's end: its conntrack entry idled out
	// (TCP: 30 s after FIN or RST) and was removed. Time is the removal,
	// Started the decision; RuleID is the rule that allowed the flow, and
	// Forward and Reply what it carried each way at this hook.
	End            bool
	Started        time.Time
	Forward, Reply FlowCounts
	// EndReason says how an ended flow's entry went: FlowEndExpired, or
	// FlowEndEvicted (an older dpd's full LRU conntrack evicted it during
	// an upgrade; dpd's own never evicts. Time is the
	// scan that found it gone, Forward and Reply as the scan before saw
	// them).
	EndReason FlowEndReason
	// Staged is set when the endpoint direction's staged policies were
	// previewed (the kernel's staged preview is on and it has some):
	// StagedAllowed and the Staged rule are what its policy would have
	// decided with them enforced in their tier order. Never enforced.
	Staged          bool
	StagedAllowed   bool
	StagedRuleID    uint64
	StagedRule      RuleInfo
	StagedRuleFound bool
}

// FlowEndReason is why a flow's conntrack entry ended.
type FlowEndReason string

const (
	FlowEndExpired FlowEndReason = "expired" // idle past its timeout, removed by the scanner
	FlowEndEvicted FlowEndReason = "evicted" // evicted by an older dpd's full LRU conntrack (upgrades only)
)

// FlowCounts are one direction's totals of a flow.
type FlowCounts struct {
	Packets, Bytes uint64
}

// FlowStats describes the flow event pipeline.
type FlowStats struct {
	Read           uint64 // events read from the kernel
	Ended          uint64 // end events from expired and evicted conntrack entries
	KernelDrops    uint64 // events the kernel's full ring could not take
	ReadErrors     uint64 // records that could not be decoded
	History        int    // events held now
	HistoryCap     int
	Subscribers    int
	SubscriberLost uint64 // events slow subscribers missed, in total

	Evicted uint64 // of Ended, the ends of evicted entries
	// Untracked: flows the last conntrack scan could not follow for
	// eviction (beyond its cap); their eviction goes unreported.
	Untracked int
}
