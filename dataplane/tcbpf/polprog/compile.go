package polprog

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Compile turns one direction's policy into a Spec. It is pure and
// deterministic: the same policy, direction, set ids and options give the
// same instructions. A set name the Resolver does not know is an error.
func Compile(pol *model.DirectionPolicy, dir model.Direction, r Resolver, opts Options) (*Spec, error) {
	if pol == nil {
		pol = &model.DirectionPolicy{}
	}
	opts = opts.withDefaults()
	p, err := newPlan(pol, dir, r)
	if err != nil {
		return nil, fmt.Errorf("compile %s policy: %w", dir, err)
	}
	p.useIndex(opts)
	codes := make([]blockCode, len(p.blocks))
	total := 0
	for i := range p.blocks {
		codes[i] = p.genBlock(i)
		total += codes[i].s.slots
	}
	reserve := 64 + 12*(len(pol.Tiers)+2)
	budget := opts.MaxChunkInsns
	splitAt := func(budget int) []span {
		if p.idx != nil {
			return p.groupSpans(codes, budget, reserve)
		}
		return split(codes, budget, reserve)
	}
	spans := splitAt(budget)
	// Too many chunks for the tail-call limit: grow them instead.
	for len(spans) > opts.MaxChunks {
		if budget >= maxChunkInsnsHard {
			return nil, fmt.Errorf("compile %s policy: %d instructions need more than %d chunks", dir, total, opts.MaxChunks)
		}
		budget = min(budget+budget/4, maxChunkInsnsHard)
		spans = splitAt(budget)
	}
	chunkOf := make([]int, len(p.blocks))
	for c, sp := range spans {
		for i := sp.lo; i < sp.hi; i++ {
			chunkOf[i] = c
		}
	}
	bodies := make([]chunkBody, len(spans))
	entries := make([][]int, len(spans))
	for c, sp := range spans {
		bodies[c] = makeBody(sp, codes, c == len(spans)-1)
		for _, x := range bodies[c].stubs {
			if t := chunkOf[x]; !slices.Contains(entries[t], x) {
				entries[t] = append(entries[t], x)
			}
		}
	}
	spec := &Spec{dir: dir, name: opts.Name, rules: p.rules}
	if p.idx != nil {
		spec.index = &specIndex{words: p.idx.words, classes: p.idx.classes, entries: p.idx.entries}
		for _, d := range p.idx.dims {
			switch {
			case d.sd != nil:
				spec.index.sets = append(spec.index.sets, d.sd)
			case d.hashed:
				spec.index.hash = true
			default:
				spec.index.trie = true
			}
		}
	}
	for c := range spans {
		slices.Sort(entries[c])
		insns, err := p.assembleChunk(c, bodies[c], entries[c], chunkOf)
		if err != nil {
			return nil, fmt.Errorf("compile %s policy: %w", dir, err)
		}
		spec.chunks = append(spec.chunks, insns)
		spec.usesIPSets = spec.usesIPSets || references(insns, mapIPSets)
		spec.usesCtrs = spec.usesCtrs || references(insns, mapRuleCtrs)
		spec.usesIPSetIdx = spec.usesIPSetIdx || references(insns, mapIPSetIdx)
	}
	return spec, nil
}

func references(insns asm.Instructions, name string) bool {
	for i := range insns {
		if insns[i].IsLoadFromMap() && insns[i].Reference() == name {
			return true
		}
	}
	return false
}
