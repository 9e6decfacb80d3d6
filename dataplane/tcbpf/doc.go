// Package tcbpf loads dpd's entry programs (bpf/dpd.c), owns the pinned maps
// they share with the policy programs, and attaches the entry programs to
// workload interfaces.
//
// Pinning: every map of the entry object is declared LIBBPF_PIN_BY_NAME and
// loaded with CollectionOptions.Maps.PinPath = Options.PinDir, so an existing
// pin is reused (a restarted dpd keeps conntrack, IP sets, counters and the
// installed policies) and a missing one is created and pinned. A pin whose
// type, key/value size, size or flags no longer match (a changed MapSizes or
// ABI) is unpinned and replaced by a fresh map; programs still attached keep
// the old instance until Attach swaps them, and their state is lost.
//
// Attach prefers TCX links (pinned under PinDir/links/<ifname>_{ingress,egress})
// and falls back to a clsact qdisc with direct-action cls_bpf filters where
// TCX is missing or ForceLegacyTC is set. An attachment whose program has the
// same tag and maps as the one loaded now is left alone; an older one is
// replaced atomically (link update / filter replace), never detached first.
//
// Open installs dpd_epilogue at dpd_jump[abi.JumpEpilogue] and in the
// epilogue arrays (epilogue.go), which policy programs tail-call directly.
// Policy programs
// (dataplane/tcbpf/polprog) are SchedCLS programs loaded against Maps() and
// installed with InstallPolicy; they must leave the expected attach type
// unset, like the entry programs: recent kernels require the programs of
// one PROG_ARRAY to agree on it.
package tcbpf
