package abi

// Host endpoints (bpf/dpd_hep.h).
const (
	// IfHost (dpd_ifstate.flags): one of the node's own interfaces,
	// policed by the host entry programs; never failed closed.
	IfHost = 1 << 2
	// IfFwdShift: dpd_ifstate.flags >> IfFwdShift of a host interface is 1 +
	// the slot of its forward policy (0: forwarded traffic is not policed).
	IfFwdShift = 16
	// StFailsafe (dpd_state.flags, trace only): a failsafe port let the
	// packet through before any policy.
	StFailsafe = 1 << 28

	// dpd_failsafes: LPM_TRIE struct dpd_failsafe_key -> u32 (1).
	MapFailsafes         = "dpd_failsafes"
	FailsafeKeyPrefixlen = 0
	FailsafeKeyPort      = 4 // host order
	FailsafeKeyProto     = 6
	FailsafeKeyFlags     = 7
	FailsafeKeyAddr      = 8 // IPv4, network order
	FailsafeKeySize      = 12
	FSKeyFixedBits       = 32
	FSInbound            = 1
	FSOutbound           = 2
	// dpd_failsafes6: LPM_TRIE struct dpd_failsafe6_key -> u32 (1), the
	// IPv6 failsafes: the IPv4 key with a 16-byte address.
	MapFailsafes6    = "dpd_failsafes6"
	FailsafeKey6Size = 24

	// ProgHepIn and ProgHepOut are the host entry programs.
	ProgHepIn  = "dpd_hep_in"
	ProgHepOut = "dpd_hep_out"

	// dpd_hep_stages: HASH ifindex -> {untracked, prednat} (each 1 + slot).
	MapHepStages       = "dpd_hep_stages"
	HepStagesSize      = 8
	CTFFailsafe        = 1 << 4 // dpd_ct_val.flags: a failsafe flow
	StHepUntracked     = 1 << 29
	StHepPreDNAT       = 1 << 30
	JumpHepContFromWEP = 14
	JumpHepContToWEP   = 15
	// NoMatchID* are polprog's counter id of "no rule matched" per
	// direction (checked by a polprog test).
	NoMatchIDFromWEP uint64 = 0xc0e77e9198c7edf2
	NoMatchIDToWEP   uint64 = 0xdce21320d0ec74ef

	// dpd_hep_cfg: ARRAY[1] {to_host, to_host_slot}: DefaultEndpointToHostAction
	// and, for Return, 1 + the slot of the wildcard's ingress policy.
	MapHepCfg    = "dpd_hep_cfg"
	HepCfgSize   = 8
	ToHostAccept = 0
	ToHostDrop   = 1
	ToHostReturn = 2
	StHepToHost  = 1 << 31
)
