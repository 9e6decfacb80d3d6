package polprog

import (
	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Map references in the emitted code; Load associates them with Maps.
const (
	mapState    = abi.MapState
	mapJump     = abi.MapJump
	mapIPSets   = abi.MapIPSets
	mapRuleCtrs = abi.MapRuleCtrs
	mapChain    = abi.MapChain
	// mapEpilogue is Maps.Epilogue, referenced only once Load made the
	// epilogue call direct (directEpilogue).
	mapEpilogue = "dpd_epi"
)

// Chunk-level labels.
const (
	labelEpilogue = "epi"
	labelBadPos   = "badpos"
)

// blockCode is one block compiled in isolation, with what it needs from
// its chunk.
type blockCode struct {
	s     stream
	needs needs
}

// genBlock compiles block i. The code starts at label b<i>, and continues
// at b<i+1> when the block does not decide.
func (p *plan) genBlock(i int) blockCode {
	b := &p.blocks[i]
	g := &gen{p: p, pfx: blockLabel(i), blk: -1}
	g.s.label(blockLabel(i))
	if p.idx != nil && i == p.idx.start {
		if i > 0 {
			// After a linear head: classify here, the head did not.
			g.needs.walk = true
			p.classify(&g.s, g.local())
			p.bitmapPtrs(&g.s, g.local(), true)
		}
		g.jumpAhead()
	}
	next := blockLabel(i + 1)
	if p.idx != nil {
		next = g.walkEntry(i)
		g.blk = i
	}
	id := p.rules[b.info].CounterID
	switch b.kind {
	case blockNoMatch:
		decide(&g.s, abi.VerdictDeny, id)
	case blockTierDefault:
		if b.action == model.ActionDeny {
			decide(&g.s, abi.VerdictDeny, id)
		}
	case blockRule:
		if !b.emitsCode() {
			break
		}
		g.matches(b.rule, next)
		switch b.action {
		case model.ActionAllow:
			decide(&g.s, abi.VerdictAllow, id)
		case model.ActionDeny:
			decide(&g.s, abi.VerdictDeny, id)
		case model.ActionPass:
			g.s.emit(asm.Ja.Label(blockLabel(b.pass)))
		case model.ActionLog:
			g.count(id)
			g.s.emit(asm.Ja.Label(next))
		}
	}
	return blockCode{s: g.s, needs: g.needs}
}

// count adds the packet to the rule's counter, except during traces.
// Counter entries are created by userspace; a missing one is skipped.
func (g *gen) count(id uint64) {
	g.needs.ctrs = true
	skip := g.local()
	g.s.emit(
		ldState(asm.R1, abi.StateTrace, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, skip),
		asm.LoadImm(asm.R1, int64(id), asm.DWord),
		asm.StoreMem(asm.RFP, stackCtrKey, asm.R1, asm.DWord),
		ldMap(asm.R1, mapRuleCtrs),
	)
	g.s.emit(stackPtr(asm.R2, stackCtrKey)...)
	g.s.emit(
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, skip),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		ldState(asm.R2, abi.StatePktLen, asm.Word),
		asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R2),
		asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord),
	)
	g.s.label(skip)
}
