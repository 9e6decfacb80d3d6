package polprog

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// blockKind is what one block of the flattened evaluation order does.
type blockKind uint8

const (
	blockRule        blockKind = iota // a rule: matches, then its action
	blockTierDefault                  // end of a tier: deny, or nothing when it passes
	blockNoMatch                      // end of the evaluation: deny
)

// block is one step of the evaluation, in order. Blocks are the unit of
// chunking and the resume points stored in chain_pos.
type block struct {
	kind    blockKind
	rule    *model.Rule
	info    int // index into plan.rules
	action  model.Action
	pass    int  // first block after the tier: where a Pass rule continues
	profile bool // profile rule: Pass means "no match"
}

// keyKind says which address (and port) of the packet a set lookup uses.
type keyKind uint8

const (
	keySrcAddr keyKind = iota // (saddr) for IP and NET sets
	keyDstAddr                // (daddr)
	keySrcPort                // (saddr, proto, sport) for named-port sets
	keyDstPort                // (daddr, proto, dport) for named-port and IP-port sets
)

func (k keyKind) dst() bool  { return k == keyDstAddr || k == keyDstPort }
func (k keyKind) port() bool { return k == keySrcPort || k == keyDstPort }

// fact is one per-packet set membership answer.
type fact struct {
	set  uint32
	kind keyKind
}

// maxMemoFacts is how many facts fit in dpd_state.pol_scratch: each u64 word
// holds 32 "known" bits (low half) and 32 "member" bits (high half).
const maxMemoFacts = 4 * 32

// plan is the flattened policy: blocks, the counter table, resolved set ids
// and the memo slot of every fact referenced by more than one rule.
type plan struct {
	dir    model.Direction
	blocks []block
	rules  []RuleInfo
	sets   map[string]uint32
	memo   map[fact]int
	// idx is the indexed strategy's data; nil for a linear scan.
	idx *index
	// passTarget marks the blocks a Pass rule continues at.
	passTarget []bool
}

func newPlan(pol *model.DirectionPolicy, dir model.Direction, r Resolver) (*plan, error) {
	p := &plan{dir: dir, sets: map[string]uint32{}, memo: map[fact]int{}}
	for _, tier := range pol.Tiers {
		var passes []int
		for _, pr := range tier.Policies {
			kind := pr.Kind
			if kind == "" {
				kind = "policy"
			}
			for i := range pr.Rules {
				ru := &pr.Rules[i]
				if err := checkAction(ru.Action); err != nil {
					return nil, fmt.Errorf("policy %s rule %d: %w", pr.Name, i, err)
				}
				if ru.Action == model.ActionPass {
					passes = append(passes, len(p.blocks))
				}
				p.addRule(block{kind: blockRule, rule: ru, action: ru.Action},
					RuleInfo{Tier: tier.Name, Policy: pr.Name, Kind: kind, Index: i, RuleID: ru.ID, Action: ru.Action,
						CounterID: ruleCounterID(dir, kind, tier.Name, pr.Name, i, ru.ID)})
			}
		}
		def := model.ActionDeny // Calico's default for anything but Pass
		if tier.DefaultAction == model.ActionPass {
			def = model.ActionPass
		}
		p.addRule(block{kind: blockTierDefault, action: def},
			RuleInfo{Tier: tier.Name, Index: -1, Action: def, Synthetic: SyntheticTierDefault,
				CounterID: tierDefaultCounterID(dir, tier.Name)})
		for _, b := range passes {
			p.blocks[b].pass = len(p.blocks)
		}
	}
	for _, pr := range pol.Profiles {
		kind := pr.Kind
		if kind == "" {
			kind = "profile"
		}
		for i := range pr.Rules {
			ru := &pr.Rules[i]
			if err := checkAction(ru.Action); err != nil {
				return nil, fmt.Errorf("profile %s rule %d: %w", pr.Name, i, err)
			}
			p.addRule(block{kind: blockRule, rule: ru, action: ru.Action, profile: true},
				RuleInfo{Policy: pr.Name, Kind: kind, Index: i, RuleID: ru.ID, Action: ru.Action,
					CounterID: ruleCounterID(dir, kind, "", pr.Name, i, ru.ID)})
		}
	}
	p.addRule(block{kind: blockNoMatch, action: model.ActionDeny},
		RuleInfo{Index: -1, Action: model.ActionDeny, Synthetic: SyntheticNoMatch, CounterID: noMatchCounterID(dir)})
	if err := p.assignMemo(r); err != nil {
		return nil, err
	}
	p.passTarget = make([]bool, len(p.blocks)+1)
	for i := range p.blocks {
		if b := &p.blocks[i]; b.kind == blockRule && b.action == model.ActionPass && b.emitsCode() {
			p.passTarget[b.pass] = true
		}
	}
	return p, nil
}

// useIndex switches p to the indexed strategy when it applies. The class
// ids take the first pol_scratch words (one u32 per dimension), so the memo
// keeps its most referenced facts in the words after them. Facts a set
// dimension answers need no memo.
func (p *plan) useIndex(opts Options) {
	p.idx = newIndex(p, opts)
	if p.idx == nil {
		return
	}
	p.markReloads()
	memoIndexed := 32 * ((len(p.idx.dims) + 1) / 2)
	var kept []fact
	for f := range p.memo {
		if !p.idx.hasDim(setDimOf(f.kind)) {
			kept = append(kept, f)
		}
	}
	slices.SortFunc(kept, func(a, b fact) int { return cmp.Compare(p.memo[a], p.memo[b]) })
	clear(p.memo)
	for i, f := range kept {
		if i < maxMemoFacts-memoIndexed {
			p.memo[f] = i + memoIndexed
		}
	}
}

// linearHead is the LinearHead option resolved.
func linearHead(opts Options) int {
	switch {
	case opts.LinearHead < 0:
		return 0
	case opts.LinearHead > 0:
		return opts.LinearHead
	case opts.Strategy == StrategyAuto:
		return defaultLinearHead
	}
	return 0
}

func (p *plan) addRule(b block, ri RuleInfo) {
	b.info = len(p.rules)
	p.rules = append(p.rules, ri)
	p.blocks = append(p.blocks, b)
}

func checkAction(a model.Action) error {
	switch a {
	case model.ActionAllow, model.ActionDeny, model.ActionPass, model.ActionLog:
		return nil
	}
	return fmt.Errorf("unknown action %v", a)
}

// emitsCode says whether block b's rule is evaluated at all: a Pass rule in
// a profile is "no match" and compiles to nothing.
func (b *block) emitsCode() bool {
	return b.kind != blockRule || !b.profile || b.action != model.ActionPass
}

// setRefs lists the facts a rule needs, resolving set names.
func (p *plan) setRefs(ru *model.Rule, r Resolver) ([]fact, error) {
	var out []fact
	add := func(names []string, k keyKind) error {
		for _, n := range names {
			id, ok := p.sets[n]
			if !ok {
				if r == nil {
					return fmt.Errorf("ip set %q without a resolver", n)
				}
				if id, ok = r.SetID(n); !ok {
					return fmt.Errorf("unknown ip set %q", n)
				}
				p.sets[n] = id
			}
			out = append(out, fact{set: id, kind: k})
		}
		return nil
	}
	lists := []struct {
		names []string
		kind  keyKind
	}{
		{ru.SrcIPSets, keySrcAddr}, {ru.NotSrcIPSets, keySrcAddr},
		{ru.DstIPSets, keyDstAddr}, {ru.NotDstIPSets, keyDstAddr},
		{ru.SrcNamedPortSets, keySrcPort}, {ru.NotSrcNamedPortSets, keySrcPort},
		{ru.DstNamedPortSets, keyDstPort}, {ru.NotDstNamedPortSets, keyDstPort},
		{ru.DstIPPortSets, keyDstPort},
	}
	for _, l := range lists {
		if err := add(l.names, l.kind); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// assignMemo resolves every set and gives a pol_scratch memo slot to the
// facts that more than one rule references (most referenced first): a fact
// used once gains nothing from caching.
func (p *plan) assignMemo(r Resolver) error {
	count := map[fact]int{}
	var order []fact
	for i := range p.blocks {
		b := &p.blocks[i]
		if b.kind != blockRule || !b.emitsCode() {
			continue
		}
		refs, err := p.setRefs(b.rule, r)
		if err != nil {
			ri := p.rules[b.info]
			return fmt.Errorf("%s %s rule %d: %w", ri.Kind, ri.Policy, ri.Index, err)
		}
		seen := map[fact]bool{}
		for _, f := range refs {
			if seen[f] {
				continue
			}
			seen[f] = true
			if count[f] == 0 {
				order = append(order, f)
			}
			count[f]++
		}
	}
	var shared []fact
	for _, f := range order {
		if count[f] > 1 {
			shared = append(shared, f)
		}
	}
	slices.SortStableFunc(shared, func(a, b fact) int { return cmp.Compare(count[b], count[a]) })
	for i, f := range shared {
		if i == maxMemoFacts {
			break
		}
		p.memo[f] = i
	}
	return nil
}
