package polprog

import (
	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Set membership through dpd_ipset_idx: each chunk that tests sets looks
// the source and/or destination address up once and copies the slot bitmap
// onto its stack (zero when the address is in no indexed set); a set test
// is then a load and a bit test.

// mapIPSetIdx is the reference name of dpd_ipset_idx in the emitted code.
const mapIPSetIdx = abi.MapIPSetIdx

// Stack of the index lookup, below the indexed strategy's (walk.go).
const (
	stackIdxKey   = -168 // struct dpd_route_key layout; addr 8-aligned
	stackSrcSlots = -232 // IPSetIdxWords u64: the source's slot bitmap
	stackDstSlots = -296 // the destination's
)

// minIndexedFacts is how many distinct (set, address) facts a policy needs
// before its set tests use the index: below it the per-set lookups (memoised
// when shared) cost no more.
const minIndexedFacts = 2

// indexedSet reports whether fact f is answered from the index.
func (p *plan) indexedSet(f fact) bool {
	return p.setIdx && !f.kind.port() && f.set >= 1 && f.set <= abi.IPSetIdxSlots
}

// chooseSetIndex decides whether the set tests use the index.
func (p *plan) chooseSetIndex(opts Options) {
	if opts.NoIPSetIndex {
		return
	}
	facts := map[fact]bool{}
	for i := range p.blocks {
		b := &p.blocks[i]
		if b.kind != blockRule || !b.emitsCode() {
			continue
		}
		refs, _ := p.setRefs(b.rule, nil) // resolved by newPlan already
		for _, f := range refs {
			if !f.kind.port() && f.set >= 1 && f.set <= abi.IPSetIdxSlots {
				facts[f] = true
			}
		}
	}
	p.setIdx = len(facts) >= minIndexedFacts
	if p.setIdx {
		for f := range p.memo {
			if p.indexedSet(f) {
				delete(p.memo, f) // answered from the stack, nothing to cache
			}
		}
	}
}

// slotTest jumps to yes when the packet's address (per kind) is in the
// set with id set, else to no.
func (g *gen) slotTest(set uint32, kind keyKind, yes, no string) {
	base := stackSrcSlots
	if kind.dst() {
		base = stackDstSlots
		g.needs.dstSlots = true
	} else {
		g.needs.srcSlots = true
	}
	slot := set - 1
	g.s.emit(
		asm.LoadMem(asm.R1, asm.RFP, int16(base+4*int(slot/32)), asm.Word),
		asm.JSet.Imm32(asm.R1, int32(uint32(1)<<(slot%32)), yes),
		asm.Ja.Label(no),
	)
}

// slotBitmaps (chunk prologue) copies the slot bitmaps the chunk tests.
// Slot n is bit n%64 of u64 word n/64; tests load u32 halves, so the slot
// layout assumes a little-endian host (as the rest of dpd does).
func slotBitmaps(s *stream, n needs) {
	for _, k := range []struct {
		need       bool
		addr, dest int
		lbl        string
	}{{n.srcSlots, abi.StateSaddr, stackSrcSlots, "srcslots"}, {n.dstSlots, abi.StateDaddr, stackDstSlots, "dstslots"}} {
		if !k.need {
			continue
		}
		key := int16(stackIdxKey)
		hit, done, plen := k.lbl+"_hit", k.lbl+"_done", k.lbl+"_plen"
		s.emit(
			ldState(asm.R1, abi.StateFamily, asm.Byte),
			asm.StoreImm(asm.RFP, key+abi.IPSetIdxKeyFamily, 0, asm.Word), // pad
			asm.StoreMem(asm.RFP, key+abi.IPSetIdxKeyFamily, asm.R1, asm.Byte),
			asm.Mov.Imm(asm.R2, abi.IPSetIdxKeyFixedBits+32),
			asm.JNE.Imm(asm.R1, 6, plen),
			asm.Mov.Imm(asm.R2, abi.IPSetIdxKeyFixedBits+128),
		)
		s.label(plen)
		s.emit(
			asm.StoreMem(asm.RFP, key+abi.IPSetIdxKeyPrefixLen, asm.R2, asm.Word),
			ldState(asm.R1, k.addr, asm.DWord),
			asm.StoreMem(asm.RFP, key+abi.IPSetIdxKeyAddr, asm.R1, asm.DWord),
			ldState(asm.R1, k.addr+8, asm.DWord),
			asm.StoreMem(asm.RFP, key+abi.IPSetIdxKeyAddr+8, asm.R1, asm.DWord),
			ldMap(asm.R1, mapIPSetIdx),
		)
		s.emit(stackPtr(asm.R2, int(key))...)
		s.emit(asm.FnMapLookupElem.Call(), asm.JNE.Imm(asm.R0, 0, hit), asm.Mov.Imm(asm.R1, 0))
		for w := range abi.IPSetIdxWords {
			s.emit(asm.StoreMem(asm.RFP, int16(k.dest+8*w), asm.R1, asm.DWord))
		}
		s.emit(asm.Ja.Label(done))
		s.label(hit)
		for w := range abi.IPSetIdxWords {
			s.emit(
				asm.LoadMem(asm.R1, asm.R0, int16(8*w), asm.DWord),
				asm.StoreMem(asm.RFP, int16(k.dest+8*w), asm.R1, asm.DWord),
			)
		}
		s.label(done)
	}
}
