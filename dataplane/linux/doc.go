// Package linux is the Linux dataplane: it implements dataplane.Kernel by
// composing the netlink side (dataplane/linux/nl: interface monitor, routes,
// neighbours, sysctls) with the BPF side (dataplane/bpf: entry programs,
// pinned maps, attach; dataplane/bpf/polprog: compiled policy programs).
//
// Policy programs are shared by content hash: endpoints whose direction
// policy hashes alike run one loaded program, reference-counted; a policy
// change loads each distinct new program once and swaps it into each
// endpoint's dpd_jump slot (an atomic map update), so the entry programs are
// never detached for a policy change.
package linux
