package polprog

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Maps are the kernel maps a compiled program references. State, Jump and
// Chain are always needed; IPSets only when a rule matches IP sets;
// RuleCtrs only when a rule logs (and to pre-create counter entries).
type Maps struct {
	State, Jump, IPSets, RuleCtrs, Chain *ebpf.Map
	// IPSetIdx is dpd_ipset_idx and SetIndex its keeper, needed when the
	// policy classifies by address sets (see Options.NoIPSetIndex).
	IPSetIdx *ebpf.Map
	SetIndex SetIndex
	// IPSetIdxHash is dpd_ipset_idxh: the index's full-length entries,
	// asked before IPSetIdx.
	IPSetIdxHash *ebpf.Map
	// Epilogue, when set, is a prog array holding the epilogue at index 0
	// (the program dpd_jump[abi.JumpEpilogue] holds): the program then
	// tail-calls it directly, which saves about 10 ns per new flow under
	// retpolines. It must not be dpd_jump or dpd_chain: the kernel walks
	// every program that direct-calls an array on each write to it and on
	// each load, so callers spread programs over a few such arrays.
	Epilogue *ebpf.Map
	// Epilogues are all the epilogue arrays the caller spreads programs
	// over: Adopt accepts a pinned program that calls any of them.
	Epilogues []*ebpf.Map
}

// Resolver maps an IP set name to the set_id used in dpd_ipsets keys.
type Resolver interface {
	SetID(name string) (uint32, bool)
}

// Synthetic kinds of RuleInfo entries that are not user rules.
const (
	SyntheticTierDefault = model.SyntheticTierDefault
	SyntheticNoMatch     = model.SyntheticNoMatch
)

// RuleInfo describes one counter id of a compiled program, in evaluation
// order: the rules of each tier, the tier's default action, the profile
// rules, then the final no-match drop. It is the model's type, so the
// kernel hands a program's table to Inspect as it is.
type RuleInfo = model.RuleInfo

// Options tune compilation. The zero value is the production default.
type Options struct {
	// MaxChunkInsns is the instruction budget of one chunk (default
	// DefaultMaxChunkInsns). A single rule larger than the budget gets a
	// chunk of its own.
	MaxChunkInsns int
	// MaxChunks caps the chunks of one program, bounded by the kernel's 33
	// tail calls per packet (default DefaultMaxChunks). When the budget would
	// need more, chunks grow instead.
	MaxChunks int
	// Name prefixes the kernel program names (debug aid, default "dpd_pol").
	Name string
	// Strategy picks how rules are found (default StrategyAuto).
	Strategy Strategy
	// NoIPSetIndex keeps one dpd_ipsets lookup per set test. By default a
	// policy whose rules test address sets on a side (two or more rules, or
	// any under StrategyIndexed) classifies the address by the
	// combination of sets holding it (setidx.go) instead.
	NoIPSetIndex bool
	// LinearHead is how many of the first rules an indexed program
	// evaluates in order before it classifies the packet, so a policy whose
	// first rules decide pays no classification. The head stops at the
	// first rule with a set test or a Pass action. 0 is the default
	// (defaultLinearHead under StrategyAuto, none under StrategyIndexed);
	// negative means none.
	LinearHead int
}

// Strategy is how a compiled program finds the rule that decides.
type Strategy uint8

const (
	// StrategyAuto indexes policies with many rules and scans small ones.
	StrategyAuto Strategy = iota
	// StrategyLinear evaluates every rule in order.
	StrategyLinear
	// StrategyIndexed classifies the packet into bitmaps of candidate
	// rules for every dimension at least one rule constrains (ports,
	// addresses), whatever the policy's size. Tests use it to cover the
	// indexed code on small policies.
	StrategyIndexed
)

// defaultLinearHead is LinearHead under StrategyAuto: a few port or
// address rules cost less than a classification lookup.
const defaultLinearHead = 8

const (
	// DefaultMaxChunkInsns keeps one chunk well inside the verifier's
	// complexity limit and 16-bit jump offsets.
	DefaultMaxChunkInsns = 8192
	// DefaultMaxChunks leaves tail calls for the entry, a possible dispatcher
	// and the epilogue out of the kernel's 33.
	DefaultMaxChunks = 28
	// maxChunkInsnsHard bounds a chunk so every jump fits a 16-bit offset.
	maxChunkInsnsHard = 32000
)

func (o Options) withDefaults() Options {
	if o.MaxChunkInsns <= 0 {
		o.MaxChunkInsns = DefaultMaxChunkInsns
	}
	if o.MaxChunkInsns > maxChunkInsnsHard {
		o.MaxChunkInsns = maxChunkInsnsHard
	}
	if o.MaxChunks <= 0 {
		o.MaxChunks = DefaultMaxChunks
	}
	if o.Name == "" {
		o.Name = "dpd_pol"
	}
	return o
}

// Spec is a compiled, not yet loaded policy program: one instruction stream
// per chunk (chunk 0 is the head) and the counter table.
type Spec struct {
	dir    model.Direction
	name   string
	chunks []asm.Instructions
	rules  []RuleInfo
	// usesIPSets / usesCtrs say whether any chunk references those maps.
	usesIPSets, usesCtrs bool
	// index is the per-program data of the indexed strategy; nil when the
	// program scans.
	index *specIndex
	// usesIPSetIdx: some chunk looks addresses up in dpd_ipset_idx.
	usesIPSetIdx bool
}

// NumChunks is the number of programs Load creates (1 = no chaining).
func (s *Spec) NumChunks() int { return len(s.chunks) }

// Chunk returns a copy of chunk i's instructions. Chain indices are
// placeholders (0) until Load.
func (s *Spec) Chunk(i int) asm.Instructions {
	out := make(asm.Instructions, len(s.chunks[i]))
	copy(out, s.chunks[i])
	return out
}

// Rules returns the counter table in evaluation order.
func (s *Spec) Rules() []RuleInfo {
	return append([]RuleInfo(nil), s.rules...)
}
