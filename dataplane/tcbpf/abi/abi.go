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

// IfStateArrEntries is DPD_IFSTATE_ARR_ENTRIES: dpd_ifstate_arr holds the
// entries of the ifindexes below it, as dpd_ifstate holds every entry.
const IfStateArrEntries = 262144

// ClockSize is sizeof(struct dpd_clock) (dpd_abi.h); its fields, in order:
// tick_ns, offset_ns, sample_jiffies, sample_ns.
const ClockSize = 32

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
	StateSize       = 144
)

// struct dpd_ipset_key layout: prefixlen counts bits after the prefixlen
// field, so an exact-set, exact-port match is IPSetKeyFixedBits + address bits.
const (
	IPSetKeyPrefixLen = 0
	IPSetKeySetID     = 4
	IPSetKeyProto     = 8
	IPSetKeyFamily    = 9  // 4 or 6, fully matched: the families never mix
	IPSetKeyPort      = 10 // network order
	IPSetKeyAddr      = 12
	IPSetKeySize      = 28
	IPSetKeyFixedBits = 64
)

// Map names (BPF object names are at most 15 characters). They are pinned
// under PinDir with the same names.
const (
	PinDir        = "/sys/fs/bpf/dpd"
	MapState      = "dpd_state"
	MapJump       = "dpd_jump"
	MapIfState    = "dpd_ifstate"
	MapIfStateArr = "dpd_ifstate_arr"
	MapClock      = "dpd_clock"
	MapIPSets     = "dpd_ipsets"
	MapConntrack  = "dpd_conntrack"
	// MapConntrackLRU is the LRU conntrack of a dpd before MapConntrack,
	// read and moved over until it is empty, then unpinned.
	MapConntrackLRU = "dpd_ct"
	MapRuleCtrs     = "dpd_rule_ctrs"
	MapChain        = "dpd_chain"
	CounterSize     = 16 // struct dpd_counter: packets, bytes
	TCActOK         = 0
	TCActShot       = 2
	TCActUnspec     = -1
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

// struct dpd_ct_key / dpd_ct_val layout (dpd_conntrack, HASH; dpd_ct, LRU_HASH).
const (
	CTKeySaddr   = 0
	CTKeyDaddr   = 16
	CTKeySport   = 32
	CTKeyDport   = 34
	CTKeyProto   = 36
	CTKeyDir     = 37
	CTKeyFamily  = 38
	CTKeyIfindex = 40
	CTKeySize    = 44

	CTValCreated  = 0
	CTValLastSeen = 8
	CTValFlags    = 16
	CTValSize     = 88
)

// dpd_ct_val.flags.
const (
	CTFEstablished = 1 << 0 // TCP: a reply with ACK was seen
	CTFClosing     = 1 << 1 // TCP: FIN or RST seen
	CTFFinOrig     = 1 << 6 // TCP: FIN from the flow's first sender (or an RST either way)
	CTFFinReply    = 1 << 7 // TCP: FIN from the other side (or an RST either way)
	CTFClosed      = CTFFinOrig | CTFFinReply
	CTFOrigHi      = 1 << 5 // the flow's first packet came from the normalized key's daddr:dport
)

// MapCTCfg is ARRAY[1] struct dpd_ct_cfg: what the programs must do for
// the older maps and programs a node may still have (dpd_abi.h).
const (
	MapCTCfg         = "dpd_ct_cfg"
	CTCfgLegacy      = 1 << 0 // dpd_ct may hold keys a dpd before normalized keys wrote
	CTCfgWriteLegacy = 1 << 1 // entries are written the old way too: older entry programs still run
	CTCfgLRU         = 1 << 2 // dpd_ct may hold entries: a miss in dpd_conntrack looks there
	CTCfgWriteLRU    = 1 << 3 // entries are written to dpd_ct: entry programs that read only it still run
)

// Conntrack idle timeouts in seconds, shared by the programs and the
// userspace scanner. TCP: established (reply ACK seen, no FIN/RST) one hour,
// closed (FIN both ways, or an RST) 10 s, anything else 30 s.
const (
	CTTimeoutTCPEstS    = 3600
	CTTimeoutTCPClosedS = 10
	CTTimeoutTCPOtherS  = 30
	CTTimeoutUDPS       = 60
	CTTimeoutICMPS      = 5
	CTTimeoutOtherS     = 60
	CTRefreshNS         = 100000000 // last_seen is rewritten at most this often
)

// IPSetNameLen is the key size of dpd_ipset_ids.
const IPSetNameLen = 64

// ---- Added by the services-and-routes work; mirrors the last section of
// dpd_abi.h. ----

// DirNAT is the dpd_ct_key.dir of a NAT flow entry: the key is a
// workload's original tuple (destination = a frontend) at its interface,
// the value's NAT fields hold the chosen backend.
const DirNAT = 2

// dpd_ct_val.flags additions.
const (
	CTFNATFwd  = 1 << 2 // client hook entry of a DNAT'd flow: replies get the frontend as source
	CTFHairpin = 1 << 3 // the backend is the client itself
)

// Offsets of the dpd_ct_val NAT fields.
const (
	CTValNATAddr = 24
	CTValNATPort = 40
	CTValNATSvc  = 44
)

// HairpinAddr is the source a hairpinned request (a workload reaching
// itself through a service) gets: 169.254.0.253, as a host-order uint32.
const HairpinAddr = 0xa9fe00fd

// dpd_state additions.
const (
	StateNATAddr  = 112
	StateNATPort  = 128
	StateNATSvc   = 132
	StateDstRoute = 136
)

// dpd_state.flags additions.
const (
	StNAT       = 1 << 13 // destination DNAT'd; StateNATAddr/Port/Svc hold the frontend
	StHairpin   = 1 << 14 // the backend is the client: source rewritten to HairpinAddr
	StNoBackend = 1 << 15 // trace only: frontend without a ready backend, dropped
)

// The frontend address filter (dpd_nat_fe_bits): bit
// (addr * NATFEHashMul) >> NATFEHashShift of a 4096-bit array, where addr
// is the address's 4 bytes read as a little-endian uint32.
const (
	NATFEBits      = 4096
	NATFEHashMul   = 2654435761
	NATFEHashShift = 20
)

// NATFEBit is the filter bit of an IPv4 address.
func NATFEBit(addr [4]byte) uint32 {
	v := uint32(addr[0]) | uint32(addr[1])<<8 | uint32(addr[2])<<16 | uint32(addr[3])<<24
	return (v * NATFEHashMul) >> NATFEHashShift
}

// NATFEBit16 is the filter bit of a 16-byte key address: an IPv6 address
// is folded to 4 bytes (the XOR of its words) first, which leaves an IPv4
// address (zero past its first 4 bytes) as it is.
func NATFEBit16(addr [16]byte) uint32 {
	var f [4]byte
	for i := range addr {
		f[i%4] ^= addr[i]
	}
	return NATFEBit(f)
}

// Map names of the NAT and route maps.
const (
	MapNATFEBits    = "dpd_nat_fe_bits" // ARRAY[1] struct dpd_nat_fe_bits
	MapNATFrontends = "dpd_nat_fe"      // HASH struct dpd_nat_fe_key -> struct dpd_nat_fe_val
	MapNATBackends  = "dpd_nat_be"      // HASH struct dpd_nat_be_key -> struct dpd_nat_be_val
	MapRoutes       = "dpd_routes"      // LPM_TRIE struct dpd_route_key -> struct dpd_route_val
)

// Sizes of the NAT and route structs.
const (
	NATFrontendKeySize = 20
	NATFrontendValSize = 16
	NATBackendKeySize  = 8
	NATBackendValSize  = 24
	RouteKeySize       = 24
	RouteValSize       = 24
	// RouteKeyFixedBits is what dpd_route_key.prefixlen counts before the
	// address: family and padding.
	RouteKeyFixedBits = 32
)

// dpd_route_val.flags: the low bits are felix's RouteType bitmap.
const (
	RTRemoteWorkload = 1 << 0
	RTRemoteHost     = 1 << 1
	RTLocalWorkload  = 1 << 2
	RTLocalHost      = 1 << 3
	RTRemoteTunnel   = 1 << 4
	RTLocalTunnel    = 1 << 5
	RTInPool         = 1 << 8  // inside an IP pool
	RTNATOutgoing    = 1 << 9  // the pool masquerades traffic leaving all pools
	RTSameSubnet     = 1 << 10 // the destination node shares our subnet
	RTTunnelVXLAN    = 1 << 11 // reached through the VXLAN device
)

// ---- Added by the policy-index work; mirrors the additions at the end of
// dpd_abi.h. ----

// dpd_ipset_idx: LPM_TRIE address -> u32 id of its combination: the IP
// sets holding it (0 is never used). Only members without protocol and port
// are indexed. Covering prefixes are folded into more specific entries, so
// the longest match alone is the answer; a policy maps the combination to
// its rules in a map of its own (polprog). The key's family (4 or 6) is
// fully matched, as in dpd_ipsets.
const (
	MapIPSetIdx          = "dpd_ipset_idx"
	MapIPSetIdxHash      = "dpd_ipset_idxh" // HASH, the same keys: full-length entries, asked first
	IPSetIdxKeyPrefixLen = 0
	IPSetIdxKeyFamily    = 4
	IPSetIdxKeyAddr      = 8
	IPSetIdxKeySize      = 24
	IPSetIdxKeyFixedBits = 32 // family + pad
)

// ---- Added by the fragments work; mirrors the additions at the end of
// dpd_abi.h. ----

// dpd_frags: LRU_HASH struct dpd_frag_key -> struct dpd_frag_val. A hook
// that sees the first fragment of a datagram records its ports and ICMP
// type/code; the datagram's later fragments at that hook take them into
// NAT, conntrack and policy. A later fragment without a recorded first
// piece younger than FragTimeoutS is dropped and counted (DropFragNoFirst).
const (
	MapFrags        = "dpd_frags"
	FragKeySaddr    = 0
	FragKeyDaddr    = 16
	FragKeyID       = 32 // network order
	FragKeyProto    = 36
	FragKeyFamily   = 37
	FragKeyDir      = 38
	FragKeyIfindex  = 40
	FragKeySize     = 44
	FragValSeen     = 0
	FragValSport    = 8
	FragValDport    = 10
	FragValICMPType = 12
	FragValICMPCode = 13
	FragValProto    = 14
	FragValSize     = 16
	FragTimeoutS    = 30
)

// dpd_drop_ctrs: PERCPU_ARRAY[DropMax] of struct dpd_counter, by reason.
const (
	MapDropCtrs     = "dpd_drop_ctrs"
	DropFragNoFirst = 0 // non-first fragment whose first piece was not seen
	DropFragTiny    = 1 // TCP fragment at offset 8 (RFC 1858)
	DropIPv6Ext     = 2 // IPv6: more extension headers than the parser walks
	DropCTFull      = 3 // an allowed new flow with no room in dpd_conntrack
	DropMax         = 8
)

// StUnpoliced (dpd_state.flags, trace only): the packet was parsed, but its
// family (IPv6) is not policed yet, so it was dropped.
const StUnpoliced = 1 << 24 // no longer set: IPv6 is policed

// ---- Added by the IPv6 datapath work; mirrors its section of dpd_abi.h. ----

// dpd_ct_key.family and dpd_nat_fe_key.family. IPv4 is 0, the value the
// byte had before IPv6 was tracked, so entries survive an upgrade.
const (
	CTFamilyV4 = 0
	CTFamilyV6 = 6
)

// StICMP6ND (dpd_state.flags, trace only): an ICMPv6 neighbour discovery
// or MLD message, passed without policy.
const StICMP6ND = 1 << 20

// NATBeFV6 (dpd_nat_be_val.flags): an IPv6 backend, for readers of the map.
const NATBeFV6 = 1 << 0

// HairpinAddr6 is the IPv6 twin of HairpinAddr, fd64:7064::fd (unique
// local; routed by the workload through its default route, as
// 169.254.0.253 is), as four host-order words.
var HairpinAddr6 = [4]uint32{0xfd647064, 0, 0, 0xfd}

// CTFamily is the dpd_ct_key.family of an address.
func CTFamily(is6 bool) uint8 {
	if is6 {
		return CTFamilyV6
	}
	return CTFamilyV4
}
