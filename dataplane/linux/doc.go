// Package linux is the Linux dataplane: it implements engine.Kernel by
// composing the netlink side (dataplane/linux/nl: interface monitor, routes,
// neighbours, sysctls) with the BPF side (dataplane/tcbpf: entry programs,
// pinned maps, attach; dataplane/tcbpf/polprog: compiled policy programs).
//
// Kernel is a composition of one programmer per concern, each owning its
// state and reaching the kernel only through narrow facilities
// (facilities.go; facilities_real.go binds them to tcbpf, polprog and nl):
//
//   - endpointProgrammer (endpoints.go, failclosed.go, adopt.go): attach
//     and verify the entry programs, dpd_ifstate, the policy slots of
//     dpd_jump, an endpoint's routes and neighbours; fail closed what
//     nothing programmed. Facilities: entryFacility, endpointNet,
//     linkFacility. Attaches run off the lock (attachq.go).
//   - policyProgrammer (programs.go, preload.go): policy programs shared
//     by content hash, pinned, adopted, preloaded. Facility:
//     programFacility.
//   - collector (gc.go): garbage collection over the two above, plus IP
//     sets and retired maps (sweepFacility).
//   - routeProgrammer (routes.go, routeMaps, routeNet), tunnelProgrammer
//     (vtep.go, tunnelNet), masqProgrammer (masquerade.go, masqNet) and
//     serviceProgrammer (services.go, natMaps).
//
// Every programmer runs under Kernel's lock (the engine, the link monitor,
// the attach worker, the periodic collection and Inspect call
// concurrently), except attaching the entry programs, which can wait for
// an RCU grace period and so runs without it; the programmers are tested
// without root against a fake kernel that records operations and prints
// its whole state (fakekernel_test.go, *_golden_test.go); the privileged
// tests prove the real kernel agrees.
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
//   - Fail closed (failclosed.go, attachq.go). A workload interface gets
//     the entry programs as soon as the monitor reports it, from an attach
//     worker that never blocks the apply path, with a dpd_ifstate entry
//     lacking READY, so it drops everything until its policy is in. An
//     apply that finds the attach still queued does it itself (it never
//     waits behind other interfaces); an endpoint whose interface carries
//     the entry programs becomes ready with map writes only.
//   - Removal never detaches (endpoints.go). After an endpoint's removal
//     an interface that still exists carries only dpd's entry programs, its
//     dpd_ifstate entry not ready (one map write: it drops everything); the
//     endpoint's routes, neighbours, jump slots and policy programs are
//     gone. The kernel drops the programs with the interface; the link pins
//     of TCX links stay until then (removing the pin would detach the
//     link), and the interface's absent event or garbage collection
//     removes them and its ifstate entry afterwards.
//   - Garbage collection (gc.go). After the first apply and then
//     periodically, what belongs to no live interface is removed: pins of
//     vanished interfaces, map entries, routes, IP sets and rule counters.
//     An endpoint adopted at start that the controller no longer sends is
//     removed like RemoveEndpoint removes it, and a workload interface
//     carrying dpd's programs with no record is failed closed; neither is
//     detached (only an interface that is no workload interface any more
//     is). A read that fails removes nothing it would have decided on.
package linux
