// Package abi mirrors bpf/include/dpd_abi.h for Go: offsets into the per-CPU
// dpd_state scratch, verdicts, jump-map layout, map names and key layouts.
// The policy compiler emits loads and stores at these offsets; a test checks
// them against the BTF of the compiled entry object.
package abi

// Hook directions (model.Egress == DirFromWEP, model.Ingress == DirToWEP).
const (
	DirFromWEP = 0
	DirToWEP   = 1
)

// Verdicts written into dpd_state.verdict.
const (
	VerdictNone  = 0
	VerdictAllow = 1
	VerdictDeny  = 2
)

// dpd_jump layout.
const (
	JumpEpilogue = 0
	JumpPolBase  = 16
)

// PolicyJumpIndex is the dpd_jump index holding the policy of an endpoint
// slot for a direction.
func PolicyJumpIndex(slot uint32, dir int) uint32 {
	return JumpPolBase + 2*slot + uint32(dir)
}

// dpd_ifstate flags.
const (
	IfReady    = 1 << 0
	IfWorkload = 1 << 1
)

// Offsets and sizes in struct dpd_state.
const (
	StateSaddr      = 0
	StateDaddr      = 16
	StateSport      = 32
	StateDport      = 34
	StateProto      = 36
	StateFamily     = 37
	StateICMPType   = 38
	StateICMPCode   = 39
	StateIfindex    = 40
	StateDir        = 44
	StateVerdict    = 48
	StateChainPos   = 52
	StateRuleID     = 56
	StatePolScratch = 64 // 4 x u64
	StatePktLen     = 96
	StateFlags      = 100
	StateTrace      = 104
	StateSize       = 112
)

// struct dpd_ipset_key layout: prefixlen counts bits after the prefixlen
// field, so an exact-set, exact-port match is IPSetKeyFixedBits + address bits.
const (
	IPSetKeyPrefixLen = 0
	IPSetKeySetID     = 4
	IPSetKeyProto     = 8
	IPSetKeyPort      = 10 // network order
	IPSetKeyAddr      = 12
	IPSetKeySize      = 28
	IPSetKeyFixedBits = 64
)

// Map names (BPF object names are at most 15 characters). They are pinned
// under PinDir with the same names.
const (
	PinDir       = "/sys/fs/bpf/dpd"
	MapState     = "dpd_state"
	MapJump      = "dpd_jump"
	MapIfState   = "dpd_ifstate"
	MapIPSets    = "dpd_ipsets"
	MapConntrack = "dpd_ct"
	MapRuleCtrs  = "dpd_rule_ctrs"
	MapChain     = "dpd_chain"
	CounterSize  = 16 // struct dpd_counter: packets, bytes
	TCActOK      = 0
	TCActShot    = 2
	TCActUnspec  = -1
)

// ---- Added by the entry-program owner; mirrors the additions at the end of
// dpd_abi.h. ----

// Map names of the additions.
const (
	MapTrace    = "dpd_trace"     // ARRAY[1] of struct dpd_state: last trace run
	MapIPSetIDs = "dpd_ipset_ids" // HASH set name -> set id (userspace only)
)

// TraceMark is the skb->mark of an Inspect trace run (BPF_PROG_TEST_RUN):
// no conntrack or counter writes, the final dpd_state lands in dpd_trace.
const TraceMark = 0x0d9d7ace

// dpd_state.flags (DPD_ST_*).
const (
	StTCPSyn    = 1 << 0
	StTCPAck    = 1 << 1
	StTCPFin    = 1 << 2
	StTCPRst    = 1 << 3
	StFragment  = 1 << 4  // non-first IPv4 fragment: no L4 header, ports 0
	StCTFwd     = 1 << 8  // trace only: a live conntrack entry of this hook matched
	StCTRev     = 1 << 9  // trace only: reply of a flow the opposite hook approved
	StNoPolicy  = 1 << 10 // trace only: no policy program at the slot
	StEpilogue  = 1 << 11 // trace only: the policy finished and tail-called the epilogue
	StCTRelated = 1 << 12 // trace only: ICMP error about a live flow of this interface
)

// struct dpd_ct_key / dpd_ct_val layout (dpd_ct, LRU_HASH).
const (
	CTKeySaddr   = 0
	CTKeyDaddr   = 16
	CTKeySport   = 32
	CTKeyDport   = 34
	CTKeyProto   = 36
	CTKeyDir     = 37
	CTKeyIfindex = 40
	CTKeySize    = 44

	CTValCreated  = 0
	CTValLastSeen = 8
	CTValFlags    = 16
	CTValSize     = 24
)

// dpd_ct_val.flags.
const (
	CTFEstablished = 1 << 0 // TCP: a reply with ACK was seen
	CTFClosing     = 1 << 1 // TCP: FIN or RST seen
)

// Conntrack idle timeouts in seconds, shared by the programs and the
// userspace scanner. TCP: established (reply ACK seen, no FIN/RST) one hour,
// anything else 30 s.
const (
	CTTimeoutTCPEstS   = 3600
	CTTimeoutTCPOtherS = 30
	CTTimeoutUDPS      = 60
	CTTimeoutICMPS     = 5
	CTTimeoutOtherS    = 60
	CTRefreshNS        = 100000000 // last_seen is rewritten at most this often
)

// IPSetNameLen is the key size of dpd_ipset_ids.
const IPSetNameLen = 64
