// Package linux is the Linux dataplane: it implements engine.Kernel by
// composing the netlink side (dataplane/linux/nl: interface monitor, routes,
// neighbours, sysctls) with the BPF side (dataplane/tcbpf: entry programs,
// pinned maps, attach; dataplane/tcbpf/polprog: compiled policy programs).
//
// Policy programs are shared by content hash: endpoints whose direction
// policy hashes alike run one loaded program, reference-counted; a policy
// change loads each distinct new program once and swaps it into each
// endpoint's dpd_jump slot (an atomic map update), so the entry programs are
// never detached for a policy change.
//
// Nothing is ever dropped for dpd's own sake:
//
//   - Restart adoption (adopt.go). Maps, TCX links and policy programs are
//     pinned (programs under <pin>/progs/<dir>-<hash>/). A new dpd rebuilds
//     its view from them (dpd_ifstate gives each interface its slot,
//     dpd_jump the programs in it) and changes nothing until the first
//     apply after InSync, which then finds unchanged endpoints already in
//     place: no load, no jump write, no attach, no ifstate or netlink write
//     (Ops counts them). Map layouts that changed are migrated with their
//     contents (dataplane/tcbpf).
//   - Fail closed (failclosed.go). A workload interface nothing has
//     programmed gets the entry programs with a dpd_ifstate entry lacking
//     READY, so it drops everything until its policy is in.
//   - Garbage collection (gc.go). After the first apply and then
//     periodically, what belongs to no live interface is removed: pins,
//     attachments, map entries, routes, IP sets and rule counters.
package linux
