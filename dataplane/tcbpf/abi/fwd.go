package abi

// Workload-to-workload redirect (bpf/dpd_fwd.h).
const (
	// MapFwdCfg: ARRAY[1] struct dpd_fwd_cfg {flags}.
	MapFwdCfg  = "dpd_fwd_cfg"
	FwdCfgSize = 4
	// FwdCfgStack (dpd_fwd_cfg.flags): packets between this node's
	// workloads take the host's IP stack instead of the redirect.
	FwdCfgStack = 1 << 0
)
