package polprog

import (
	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// allSets fails unless the packet's address is in every set (AND).
func (g *gen) allSets(names []string, kind keyKind, fail string) {
	for _, n := range names {
		next := g.local()
		g.setTest(n, kind, next, fail)
		g.s.label(next)
	}
}

// noSets fails when the packet's address is in any set.
func (g *gen) noSets(names []string, kind keyKind, fail string) {
	for _, n := range names {
		next := g.local()
		g.setTest(n, kind, fail, next)
		g.s.label(next)
	}
}

// anySet jumps to yes when the packet is in any of the sets, else to no.
func (g *gen) anySet(names []string, kind keyKind, yes, no string) {
	for _, n := range names {
		next := g.local()
		g.setTest(n, kind, yes, next)
		g.s.label(next)
	}
	g.s.emit(asm.Ja.Label(no))
}

// setTest jumps to yes when the packet is a member of set name (looked up
// with the key kind), else to no. A memoised fact is answered from
// pol_scratch when known; otherwise the lookup result is recorded there, so
// each shared fact costs at most one LPM lookup per packet, across chunks.
func (g *gen) setTest(name string, kind keyKind, yes, no string) {
	s := &g.s
	f := fact{set: g.p.sets[name], kind: kind}
	slot, memo := g.p.memo[f]
	g.needs.ipsets = true
	key := stackSrcKey
	if kind.dst() {
		key = stackDstKey
		g.needs.dstKey = true
	} else {
		g.needs.srcKey = true
	}
	var known, member int16
	var bit int32
	known2 := ""
	if memo {
		known = int16(abi.StatePolScratch + 8*(slot/32))
		member = known + 4
		bit = int32(uint32(1) << (slot % 32))
		known2 = g.local()
		s.emit(asm.LoadMem(asm.R1, rState, known, asm.Word), asm.JSet.Imm32(asm.R1, bit, known2))
	}
	s.emit(asm.StoreImm(asm.RFP, int16(key+abi.IPSetKeySetID), int64(f.set), asm.Word))
	if kind.port() {
		port := abi.StateSport
		if kind.dst() {
			port = abi.StateDport
		}
		s.emit(
			ldState(asm.R1, abi.StateProto, asm.Byte),
			asm.StoreMem(asm.RFP, int16(key+abi.IPSetKeyProto), asm.R1, asm.Byte),
			ldState(asm.R1, port, asm.Half),
			asm.HostTo(asm.BE, asm.R1, asm.Half),
			asm.StoreMem(asm.RFP, int16(key+abi.IPSetKeyPort), asm.R1, asm.Half),
		)
	} else {
		// proto and port are zero for IP and NET sets; the family byte
		// between them is the prologue's.
		s.emit(
			asm.StoreImm(asm.RFP, int16(key+abi.IPSetKeyProto), 0, asm.Byte),
			asm.StoreImm(asm.RFP, int16(key+abi.IPSetKeyPort), 0, asm.Half),
		)
	}
	s.emit(ldMap(asm.R1, mapIPSets))
	s.emit(stackPtr(asm.R2, key)...)
	s.emit(asm.FnMapLookupElem.Call())
	if !memo {
		s.emit(asm.JEq.Imm(asm.R0, 0, no), asm.Ja.Label(yes))
		return
	}
	s.emit(
		asm.LoadMem(asm.R1, rState, known, asm.Word),
		asm.Or.Imm32(asm.R1, bit),
		asm.StoreMem(rState, known, asm.R1, asm.Word),
		asm.JEq.Imm(asm.R0, 0, no),
		asm.LoadMem(asm.R1, rState, member, asm.Word),
		asm.Or.Imm32(asm.R1, bit),
		asm.StoreMem(rState, member, asm.R1, asm.Word),
		asm.Ja.Label(yes),
	)
	s.label(known2)
	s.emit(
		asm.LoadMem(asm.R1, rState, member, asm.Word),
		asm.JSet.Imm32(asm.R1, bit, yes),
		asm.Ja.Label(no),
	)
}
