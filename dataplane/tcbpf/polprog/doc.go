// Package polprog compiles one direction of an endpoint's policy
// (model.DirectionPolicy) into eBPF bytecode that the C entry program
// tail-calls.
//
// The entry program fills the per-CPU dpd_state (see bpf/include/dpd_abi.h)
// and tail-calls the policy head. The compiled program evaluates tiers,
// policies, rules and profiles with Calico's first-match semantics, writes
// dpd_state.verdict and dpd_state.rule_id and tail-calls the epilogue:
// directly at index 0 of Maps.Epilogue when the loader gives one, else
// indirectly at dpd_jump[abi.JumpEpilogue]. If any tail call fails it
// returns TC_ACT_SHOT.
//
// Large policies are split into chunks that continue each other through the
// dpd_chain program array: chain_pos records the block to resume at. IP set
// membership is looked up at most once per packet per (set, key kind) that
// more than one rule references: the answer is cached in
// dpd_state.pol_scratch, which survives tail calls. Compile is pure (no
// kernel); Spec.Load loads the chunks and wires the chain.
//
// Per-packet cost must not grow like a linear scan. Policies with many
// rules use the indexed strategy (index.go, walk.go): the packet is
// classified once per dimension (ports, addresses) in a trie or, when every
// prefix is full-length, an exact-match hash the program owns; the walk
// jumps to the first 64-rule word that can hold a candidate, the class
// bitmaps of candidate rules are ANDed per word, and only candidates run
// their remaining matches, in rule order. A short linear head of cheap
// rules runs before the classification. Address sets are dimensions too
// (setidx.go, polsets.go): the node's index maps an address to its
// combination of sets, and the program's own hash, kept current through a
// SetIndex watch, maps the combination to its rules, so set tests cost two
// lookups per address whatever the number of sets.
package polprog
