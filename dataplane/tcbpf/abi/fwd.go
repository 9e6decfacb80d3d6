package abi

// Workload-to-workload redirect (bpf/dpd_fwd.h).
const (
	// MapFwdCfg: ARRAY[1] struct dpd_fwd_cfg {flags}.
	MapFwdCfg  = "dpd_fwd_cfg"
	FwdCfgSize = 4
	// FwdCfgStack (dpd_fwd_cfg.flags): packets between this node's
	// workloads take the host's IP stack instead of the redirect.
	FwdCfgStack = 1 << 0
	// FwdCfgNoPeer (dpd_fwd_cfg.flags): an established flow's packets are
	// redirected to the destination's host-side interface too, never
	// into its namespace.
	FwdCfgNoPeer = 1 << 1
)

// The programs' cache of workload-to-workload FIB lookups (bpf/dpd_fwd.h):
// userspace only pins it, and never migrates it.
const (
	// MapFwdCache: PERCPU_ARRAY[FwdCacheEntries] struct dpd_fwd_cache_ent.
	MapFwdCache     = "dpd_fwd_cache"
	FwdCacheEntSize = 64
	FwdCacheBits    = 10
	FwdCacheEntries = 1 << FwdCacheBits
	// FwdCacheNS: how long an entry stands for the FIB.
	FwdCacheNS = 20_000_000
)
