package abi

// ---- Added by the flow-events work; mirrors its section of dpd_abi.h. ----

// Map names of the flow events.
const (
	MapEvents    = "dpd_events"   // RINGBUF of struct dpd_flow_event
	MapEvDrops   = "dpd_ev_drops" // PERCPU_ARRAY[1] u64: events a full ring could not take
	MapEvCfg     = "dpd_ev_cfg"   // ARRAY[1] struct dpd_ev_cfg
	MapEvDeny    = "dpd_ev_deny"  // ARRAY u32 -> struct dpd_ev_deny, direct-mapped by a hash of the flow
	EvCfgOn      = 1 << 0         // dpd_ev_cfg.flags: events are written
	EvDecided    = 1              // dpd_flow_event.kind: the policy decided
	EvNoPolicy   = 2              // dpd_flow_event.kind: no policy program: dropped
	EvCfgSize    = 16
	EvDenySize   = 64
	FlowEventLen = 112 // sizeof(struct dpd_flow_event)
)

// Offsets in struct dpd_flow_event.
const (
	EvTsNs       = 0
	EvRuleID     = 8
	EvSaddr      = 16
	EvDaddr      = 32
	EvSport      = 48
	EvDport      = 50
	EvProto      = 52
	EvFamily     = 53
	EvDir        = 54
	EvVerdict    = 55
	EvIfindex    = 56
	EvFlags      = 60
	EvSuppressed = 64
	EvPktLen     = 68
	EvNATAddr    = 72
	EvNATPort    = 88
	EvKind       = 90
	EvICMPType   = 91
	EvNATSvc     = 92
	EvICMPCode   = 96

	EvPreviewVerdict = 97  // DPD_VERDICT_* of the staged preview; VerdictNone: none
	EvPreviewRuleID  = 104 // the preview's deciding rule
)

// Staged-policy preview: with EvCfgPreview set, the epilogue runs the
// endpoint's preview program (MapPreview, indexed as dpd_jump) on each
// decided packet and reports its verdict beside the real one.
const (
	MapPreview    = "dpd_preview"    // PROG_ARRAY, sized as dpd_jump
	MapPreviewSt  = "dpd_preview_st" // PERCPU_ARRAY[1] struct dpd_preview_st
	EvCfgPreview  = 1 << 1           // dpd_ev_cfg.flags: run the previews
	StPreview     = 1 << 27          // dpd_state.flags: the preview program is running
	PreviewStSize = 16
)

// Offsets of the dpd_ct_val fields the flow-events work appended: the
// allowing rule and each direction's totals, for the flow's end event.
const (
	CTValRuleID   = 48
	CTValPktsFwd  = 56
	CTValBytesFwd = 64
	CTValPktsRev  = 72
	CTValBytesRev = 80
)
