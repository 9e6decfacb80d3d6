package polprog

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Code of the indexed strategy. The head classifies the packet in every
// dimension and stores the class ids in pol_scratch (they survive tail
// calls). Every chunk looks up the bitmap of each class once and keeps the
// pointers on its stack. Blocks are grouped by bitmap word: at the start
// of a group (and wherever a jump lands) R7 is loaded with the AND of the
// dimensions' words and R8 with its upper half; a zero word skips the
// whole group. Each rule then costs one bit test unless it is a candidate.
//
// Chunks are cut only between groups, so R7/R8 are valid wherever a rule
// tests its bit.

// Per-program maps of the indexed strategy; Load creates them.
const (
	mapCls = "dpd_pol_cls" // LPM_TRIE classification key -> u32 class
	// mapClsHash compares whole keys: it relies on the bytes of dpd_state's
	// addresses past an IPv4 address being zero (the entry zeroes dpd_state).
	mapClsHash = "dpd_pol_clsh" // HASH full-length classification key -> u32 class (idxDim.hashed)
	mapBits    = "dpd_pol_bits" // ARRAY class -> bitmap of words u64, then its first non-zero word (bitsValue)
)

// Registers of the walk (callee-saved, untouched by rule code).
const (
	rWord = asm.R7 // AND of the current word
	rHigh = asm.R8 // rWord >> 32, for bits 32-63 (jset immediates are 32-bit)
)

// Stack of the indexed strategy, below the common layout (regs.go).
const (
	stackClsKey  = -104 // classification key (clsKeySize bytes; data 8-aligned)
	stackBitsKey = -108 // u32 class id for dpd_pol_bits
	stackDimPtr  = -192 // numDims x 8 bytes: bitmap pointer of dimension slot i at stackDimPtr + 8*i
)

func nLabel(i int) string { return fmt.Sprintf("n%d", i) }

// reloadAt reports whether block i loads the word registers on entry: the
// first rule at or after a group start or a block where Pass rules land
// (blocks without a bit do not use the registers).
func (p *plan) reloadAt(i int) bool {
	return p.idx.reload[i]
}

// markReloads fills idx.reload.
func (p *plan) markReloads() {
	ix := p.idx
	ix.reload = make([]bool, len(p.blocks))
	pending := false
	for i := range p.blocks {
		pending = pending || ix.groupStart(i) || p.passTarget[i]
		if ix.bitOf[i] >= 0 && pending {
			ix.reload[i], pending = true, false
		}
	}
}

// contLabel is where a block that does not decide continues with block j:
// past j's reload when j is in the same group (the registers are valid).
func (p *plan) contLabel(j int) string {
	if j < len(p.blocks) && !p.idx.groupStart(j) {
		return nLabel(j)
	}
	return blockLabel(j)
}

// walkEntry emits the start of block i under the indexed strategy: the
// reload when needed, then the bit test. It returns the label where the
// block continues when it does not decide.
func (g *gen) walkEntry(i int) string {
	p, ix := g.p, g.p.idx
	if p.reloadAt(i) {
		w := ix.bitOf[i] / 64
		g.reload(w, p.skipTarget(i, w))
	}
	g.s.label(nLabel(i))
	next := p.contLabel(i + 1)
	bit := ix.bitOf[i]
	if bit < 0 {
		return next
	}
	reg, b := rWord, bit%64
	if b >= 32 {
		reg, b = rHigh, b-32
	}
	cand := g.local()
	g.s.emit(asm.JSet.Imm32(reg, int32(uint32(1)<<b), cand), asm.Ja.Label(next))
	g.s.label(cand)
	return next
}

// skipTarget is where a zero word w continues from block i: the first later
// block that decides without a bit, or the next group.
func (p *plan) skipTarget(i, w int) string {
	for k := i + 1; k < len(p.blocks); k++ {
		if bit := p.idx.bitOf[k]; bit >= 0 {
			if bit/64 > w {
				return blockLabel(k)
			}
			continue
		}
		b := &p.blocks[k]
		if b.kind == blockNoMatch || (b.kind == blockTierDefault && b.action == model.ActionDeny) {
			return blockLabel(k)
		}
	}
	return blockLabel(len(p.blocks) - 1)
}

// reload sets rWord to the AND of the dimensions' word w and rHigh to its
// upper half, or jumps to skip when it is zero.
func (g *gen) reload(w int, skip string) {
	g.needs.walk = true
	for n, d := range g.p.idx.dims {
		r := rWord
		if n > 0 {
			r = asm.R1
		}
		g.s.emit(
			asm.LoadMem(r, asm.RFP, int16(stackDimPtr+8*d.slot), asm.DWord),
			asm.LoadMem(r, r, int16(8*w), asm.DWord),
		)
		if n > 0 {
			g.s.emit(asm.And.Reg(rWord, asm.R1))
		}
	}
	g.s.emit(
		asm.JEq.Imm(rWord, 0, skip),
		asm.Mov.Reg(rHigh, rWord),
		asm.RSh.Imm(rHigh, 32),
	)
}

// classify (the head, or the index's start block after a linear head)
// looks the packet up in every dimension and stores the class ids in
// pol_scratch. pfx keeps its labels unique in the chunk.
func (p *plan) classify(s *stream, pfx string) {
	for _, d := range p.idx.dims {
		if d.sd != nil {
			classifySet(s, d, pfx)
			s.emit(asm.StoreMem(rState, int16(abi.StatePolScratch+4*d.slot), asm.R1, asm.Word))
			continue
		}
		done := fmt.Sprintf("%scls%d", pfx, d.slot)
		key := int16(stackClsKey)
		s.emit(
			asm.StoreImm(asm.RFP, key+clsKeyDim, int64(d.kind), asm.Byte),
			asm.StoreImm(asm.RFP, key+clsKeyFamily+1, 0, asm.Half), // pad
		)
		if d.kind.port() {
			have := fmt.Sprintf("%sclsports%d", pfx, d.slot)
			s.emit(ldState(asm.R1, abi.StateProto, asm.Byte))
			for _, pp := range portProtos {
				s.emit(asm.JEq.Imm(asm.R1, int32(pp), have))
			}
			s.emit(asm.Mov.Imm(asm.R1, int32(d.noPorts)), asm.Ja.Label(done))
			s.label(have)
			port := abi.StateDport
			if d.kind == dimSport {
				port = abi.StateSport
			}
			if d.hashed {
				// A hash key is compared whole: no stale bytes after the port.
				s.emit(
					asm.Mov.Imm(asm.R2, 0),
					asm.StoreMem(asm.RFP, key+clsKeyData, asm.R2, asm.DWord),
					asm.StoreMem(asm.RFP, key+clsKeyData+8, asm.R2, asm.DWord),
				)
			}
			s.emit(
				asm.StoreImm(asm.RFP, key+clsKeyPrefixLen, clsKeyFixedBits+16, asm.Word),
				asm.StoreImm(asm.RFP, key+clsKeyFamily, 0, asm.Byte),
				ldState(asm.R1, port, asm.Half),
				asm.HostTo(asm.BE, asm.R1, asm.Half),
				asm.StoreMem(asm.RFP, key+clsKeyData, asm.R1, asm.Half),
			)
		} else {
			plen := fmt.Sprintf("%sclsplen%d", pfx, d.slot)
			addr := abi.StateSaddr
			if d.kind == dimDaddr {
				addr = abi.StateDaddr
			}
			s.emit(
				ldState(asm.R1, abi.StateFamily, asm.Byte),
				asm.StoreMem(asm.RFP, key+clsKeyFamily, asm.R1, asm.Byte),
				asm.Mov.Imm(asm.R2, clsKeyFixedBits+32),
				asm.JNE.Imm(asm.R1, 6, plen),
				asm.Mov.Imm(asm.R2, clsKeyFixedBits+128),
			)
			s.label(plen)
			s.emit(
				asm.StoreMem(asm.RFP, key+clsKeyPrefixLen, asm.R2, asm.Word),
				ldState(asm.R1, addr, asm.DWord),
				asm.StoreMem(asm.RFP, key+clsKeyData, asm.R1, asm.DWord),
				ldState(asm.R1, addr+8, asm.DWord),
				asm.StoreMem(asm.RFP, key+clsKeyData+8, asm.R1, asm.DWord),
			)
		}
		if d.hashed {
			s.emit(ldMap(asm.R1, mapClsHash))
		} else {
			s.emit(ldMap(asm.R1, mapCls))
		}
		s.emit(stackPtr(asm.R2, int(key))...)
		s.emit(
			asm.FnMapLookupElem.Call(),
			asm.Mov.Imm(asm.R1, int32(d.miss)),
			asm.JEq.Imm(asm.R0, 0, done),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		)
		s.label(done)
		s.emit(asm.StoreMem(rState, int16(abi.StatePolScratch+4*d.slot), asm.R1, asm.Word))
	}
}

// bitmapPtrs (every chunk that walks) looks up the bitmap of each
// dimension's class and keeps the pointer on the stack; classified: the
// chunk classified the packet, which left the set dimensions' pointers. A
// missing class cannot happen for address and port dimensions (ids come
// from the program's own trie); a set dimension's class is looked up again
// as "in none of the program's sets" when absent: not classified yet (a
// chunk entered before the index's start block), or its combination
// released since classification.
func (p *plan) bitmapPtrs(s *stream, pfx string, classified bool) {
	for _, d := range p.idx.dims {
		if d.sd != nil && classified {
			continue
		}
		ok := fmt.Sprintf("%sdimptr%d", pfx, d.slot)
		if d.sd != nil {
			setHash(s, fmt.Sprintf("%sdim%d", pfx, d.slot))
		}
		s.emit(
			ldState(asm.R1, abi.StatePolScratch+4*d.slot, asm.Word),
			asm.StoreMem(asm.RFP, stackBitsKey, asm.R1, asm.Word),
		)
		if d.sd != nil {
			setMap(s)
		} else {
			s.emit(ldMap(asm.R1, mapBits))
		}
		s.emit(stackPtr(asm.R2, stackBitsKey)...)
		s.emit(asm.FnMapLookupElem.Call(), asm.JNE.Imm(asm.R0, 0, ok))
		if d.sd != nil {
			// A chunk entered before the index's start block (after a
			// linear head) finds no class yet: the start block classifies.
			// Meanwhile the side's miss entry (always present) stands in.
			s.emit(asm.StoreImm(asm.RFP, stackBitsKey, int64(d.sd.side), asm.Word))
			setMap(s)
			s.emit(stackPtr(asm.R2, stackBitsKey)...)
			s.emit(asm.FnMapLookupElem.Call(), asm.JNE.Imm(asm.R0, 0, ok))
		}
		s.emit(
			asm.Mov.Imm(asm.R0, abi.TCActShot),
			asm.Return(),
		)
		s.label(ok)
		s.emit(asm.StoreMem(asm.RFP, int16(stackDimPtr+8*d.slot), asm.R0, asm.DWord))
	}
}

// groupSpans splits the blocks into chunks, cutting only at group starts.
func (p *plan) groupSpans(codes []blockCode, budget, reserve int) []span {
	var starts []int
	var groups []blockCode
	for i := range codes {
		if p.idx.groupStart(i) {
			starts = append(starts, i)
			groups = append(groups, blockCode{})
		}
		groups[len(groups)-1].s.slots += codes[i].s.slots
	}
	starts = append(starts, len(codes))
	var out []span
	for _, sp := range split(groups, budget, reserve) {
		out = append(out, span{starts[sp.lo], starts[sp.hi]})
	}
	return out
}

// maxChainTargets bounds the chunks a head can tail-call (the kernel's 33
// tail calls per packet bound the chunks of a program).
const maxChainTargets = 33

// firstDeciding is the first block from the index's start that decides
// without a bit (a denying tier default or the final no-match): no jump may
// pass it.
func (p *plan) firstDeciding() int {
	for k := p.idx.start; k < len(p.blocks); k++ {
		if p.idx.bitOf[k] >= 0 {
			continue
		}
		if b := &p.blocks[k]; b.kind == blockNoMatch || (b.kind == blockTierDefault && b.action == model.ActionDeny) {
			return k
		}
	}
	return len(p.blocks) - 1
}

// jumpAhead (at the index's start block, with more than one word) skips
// the words no candidate can be in. The AND of the dimensions' bitmaps is
// zero below the largest of their first non-zero words s, so every rule
// before word s's group is no candidate: the walk starts at that group, or
// at the first deciding block without a bit when that comes first (jumping
// past it would change the verdict). A binary search over s picks the
// target; targets in other chunks go through their stubs.
func (g *gen) jumpAhead() {
	p, ix := g.p, g.p.idx
	if ix.words < 2 {
		return
	}
	g.needs.walk = true
	d := p.firstDeciding()
	maxW := 0
	for w := 1; w < ix.words; w++ {
		if ix.blockOf[64*w] < d {
			maxW = w
		}
	}
	s := &g.s
	here := g.local()
	s.emit(asm.Mov.Imm(asm.R1, 0))
	for _, dim := range ix.dims {
		keep := g.local()
		s.emit(
			asm.LoadMem(asm.R2, asm.RFP, int16(stackDimPtr+8*dim.slot), asm.DWord),
			asm.LoadMem(asm.R2, asm.R2, int16(8*ix.words), asm.Word),
			asm.JGE.Reg(asm.R1, asm.R2, keep),
			asm.Mov.Reg(asm.R1, asm.R2),
		)
		s.label(keep)
	}
	s.emit(
		asm.JEq.Imm(asm.R1, 0, here),
		asm.JGT.Imm(asm.R1, int32(maxW), blockLabel(d)),
	)
	// Each target may need a stub in the head (two slots) and the search
	// a test, and each chunk targeted its tail call (ten): estimate them,
	// the split must keep the head in budget.
	s.slots += 4*maxW + 10*min(maxW, maxChainTargets)
	if maxW >= 1 {
		g.search(1, maxW, func(w int) string { return blockLabel(ix.blockOf[64*w]) })
	} else {
		s.emit(asm.Ja.Label(blockLabel(d)))
	}
	s.label(here)
}

// search emits a binary search on R1 over [lo, hi] that jumps to
// target(R1); R1 is known to be in the range.
func (g *gen) search(lo, hi int, target func(int) string) {
	if lo == hi {
		g.s.emit(asm.Ja.Label(target(lo)))
		return
	}
	mid := (lo + hi) / 2
	right := g.local()
	g.s.emit(asm.JGT.Imm(asm.R1, int32(mid), right))
	g.search(lo, mid, target)
	g.s.label(right)
	g.search(mid+1, hi, target)
}
