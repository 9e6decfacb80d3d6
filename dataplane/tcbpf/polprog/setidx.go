package polprog

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Address sets as dimensions of the indexed strategy. The node's index
// (dpd_ipset_idx, kept by dataplane/tcbpf) maps an address to the id of
// its combination: the sets holding it. A program that classifies by sets
// owns dpd_pol_sets, a hash from (combination, side) to the bitmap of its
// rules whose set conditions on that side hold for the combination, and
// keeps it current as combinations come and go (SetIndex). A combination
// the program has no entry for holds none of its sets: it gets the side's
// miss bitmap, stored under combination 0. So a packet costs one index
// lookup and one dpd_pol_sets lookup per side, however many sets the node
// or the policy has, and a set delta writes only the index (and, when it
// makes a new combination, one entry per program using one of its sets).

// SetIndex is the node's IP set index as programs that classify by sets
// use it (implemented by dataplane/tcbpf). WatchCombos calls add for every
// combination in use that holds one of sets, then for every new one before
// any address maps to it, and remove once no address maps to one any more,
// until stop is called. The calls are serialised with the index's changes.
type SetIndex interface {
	WatchCombos(sets []uint32, add func(id uint32, sets []uint32) error, remove func(id uint32) error) (stop func(), err error)
}

// Reference names of dpd_ipset_idx and dpd_ipset_idxh in the emitted code.
const (
	mapIPSetIdx     = abi.MapIPSetIdx
	mapIPSetIdxHash = abi.MapIPSetIdxHash
)

// mapPolSets is the per-program map of the set dimensions: an
// ARRAY_OF_MAPS whose slot 0 holds a HASH u32 combination<<1 | side ->
// bitmap words u64, then its first non-zero word (polsets.go).
const mapPolSets = "dpd_pol_sets"

// maxCombos bounds a program's set hash: no more combinations than
// index entries can exist.
const maxCombos = 1 << 24

// Stack of the set dimensions' lookups, below the indexed strategy's.
const (
	stackIdxKey = -224 // struct dpd_route_key layout; addr 8-aligned
	stackSetKey = -228 // u32 key of the set hash
	stackSetMap = -240 // the set hash (from dpd_pol_sets[0])
	stackZero   = -244 // u32 0: dpd_pol_sets' key
)

// setMap loads the set hash into R1 (from the stack once setHash stored
// it there).
func setMap(s *stream) {
	s.emit(asm.LoadMem(asm.R1, asm.RFP, stackSetMap, asm.DWord))
}

// setHash looks dpd_pol_sets[0] up and keeps the hash on the stack; it
// fails closed when the slot is empty (it never is).
func setHash(s *stream, pfx string) {
	ok := pfx + "sethash"
	s.emit(asm.StoreImm(asm.RFP, stackZero, 0, asm.Word), ldMap(asm.R1, mapPolSets))
	s.emit(stackPtr(asm.R2, stackZero)...)
	s.emit(
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, ok),
		asm.Mov.Imm(asm.R0, abi.TCActShot),
		asm.Return(),
	)
	s.label(ok)
	s.emit(asm.StoreMem(asm.RFP, stackSetMap, asm.R0, asm.DWord))
}

// minSetFacts is how many rules must test an address set on one side
// before the automatic strategy classifies that side: below it a set test
// (memoised when shared) costs no more.
const minSetFacts = 2

// setUse is one rule's use of a set on one side.
type setUse struct {
	bit int
	neg bool
}

// setDim is a set dimension's rule conditions: what a program needs to
// turn a combination of sets into the bitmap of its rules.
type setDim struct {
	side  uint32 // 0 source, 1 destination: the low bit of dpd_pol_sets keys
	words int
	miss  []uint64            // the bitmap of a combination with none of the sets
	uses  map[uint32][]setUse // by set id
	npos  []int               // by bit: how many distinct sets must hold
}

// setDimOf is the set dimension answering facts of kind k (numDims: none).
func setDimOf(k keyKind) dimKind {
	switch k {
	case keySrcAddr:
		return dimSrcSet
	case keyDstAddr:
		return dimDstSet
	}
	return numDims
}

// hasDim reports whether the index classifies dimension d.
func (ix *index) hasDim(d dimKind) bool {
	return ix != nil && slices.ContainsFunc(ix.dims, func(x idxDim) bool { return x.kind == d })
}

// setCond is rule ru's address-set condition on the side of d: in every
// set of one list, in none of the other (ids resolved by newPlan).
func (p *plan) setCond(ru *model.Rule, d dimKind) dimCond {
	in, out := ru.SrcIPSets, ru.NotSrcIPSets
	if d == dimDstSet {
		in, out = ru.DstIPSets, ru.NotDstIPSets
	}
	ids := func(names []string) []uint32 {
		var l []uint32
		for _, n := range names {
			l = append(l, p.sets[n])
		}
		slices.Sort(l)
		return slices.Compact(l)
	}
	return dimCond{sets: ids(in), notSets: ids(out), hasPos: len(in) > 0, exact: true}
}

// addSetDim classifies the side of d by the combination of sets holding
// the address.
func (ix *index) addSetDim(d dimKind, conds []dimCond) {
	sd := &setDim{words: ix.words, miss: make([]uint64, ix.words), uses: map[uint32][]setUse{}, npos: make([]int, len(conds))}
	if d == dimDstSet {
		sd.side = 1
	}
	dim := idxDim{kind: d, slot: len(ix.dims), exact: make([]bool, len(conds)), sd: sd}
	for bit := range conds {
		c := &conds[bit]
		dim.exact[bit] = true
		if !c.hasPos {
			sd.miss[bit/64] |= 1 << (bit % 64)
		}
		sd.npos[bit] = len(c.sets)
		for _, id := range c.sets {
			sd.uses[id] = append(sd.uses[id], setUse{bit: bit})
		}
		for _, id := range c.notSets {
			sd.uses[id] = append(sd.uses[id], setUse{bit: bit, neg: true})
		}
	}
	ix.dims = append(ix.dims, dim)
}

// bitmap is the bitmap of a combination of sets, false when it holds none
// of the dimension's sets (the miss bitmap answers it).
func (sd *setDim) bitmap(sets []uint32) ([]uint64, bool) {
	hits := map[int]int{}
	neg := map[int]bool{}
	for _, id := range sets {
		for _, u := range sd.uses[id] {
			if u.neg {
				neg[u.bit] = true
			} else {
				hits[u.bit]++
			}
			if _, ok := hits[u.bit]; !ok {
				hits[u.bit] = 0
			}
		}
	}
	if len(hits) == 0 {
		return nil, false
	}
	bm := slices.Clone(sd.miss)
	for bit, n := range hits {
		if n == sd.npos[bit] && !neg[bit] {
			bm[bit/64] |= 1 << (bit % 64)
		} else {
			bm[bit/64] &^= 1 << (bit % 64)
		}
	}
	return bm, true
}

// setKey is the dpd_pol_sets key of combination id on side.
func setKey(id, side uint32) uint32 { return id<<1 | side }

// setIDs are the sets the dimensions use, sorted.
func setIDs(dims []*setDim) []uint32 {
	var out []uint32
	for _, sd := range dims {
		for id := range sd.uses {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// classifySet (in classify) looks the address of d's side up in the node's
// index, then the combination in dpd_pol_sets, and leaves in R1 the key
// whose entry holds the packet's bitmap (the combination's, or the miss
// entry) and the entry's pointer at the dimension's stack slot, so the
// chunk that classifies need not look it up again.
func classifySet(s *stream, d idxDim, pfx string) {
	key := int16(stackIdxKey)
	addr := abi.StateSaddr
	if d.sd.side == 1 {
		addr = abi.StateDaddr
	}
	side := int32(d.sd.side)
	lbl := func(n string) string { return fmt.Sprintf("%sset%s%d", pfx, n, d.slot) }
	plen, miss, have, found := lbl("plen"), lbl("miss"), lbl("have"), lbl("found")
	setHash(s, lbl(""))
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
		ldState(asm.R1, addr, asm.DWord),
		asm.StoreMem(asm.RFP, key+abi.IPSetIdxKeyAddr, asm.R1, asm.DWord),
		ldState(asm.R1, addr+8, asm.DWord),
		asm.StoreMem(asm.RFP, key+abi.IPSetIdxKeyAddr+8, asm.R1, asm.DWord),
		ldMap(asm.R1, mapIPSetIdxHash), // a full-length entry is the longest match
	)
	s.emit(stackPtr(asm.R2, int(key))...)
	s.emit(asm.FnMapLookupElem.Call(), asm.JNE.Imm(asm.R0, 0, found), ldMap(asm.R1, mapIPSetIdx))
	s.emit(stackPtr(asm.R2, int(key))...)
	s.emit(
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, miss), // in no set
	)
	s.label(found)
	s.emit(
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.LSh.Imm(asm.R1, 1),
		asm.Or.Imm(asm.R1, side),
		asm.StoreMem(asm.RFP, stackSetKey, asm.R1, asm.Word),
	)
	setMap(s)
	s.emit(stackPtr(asm.R2, stackSetKey)...)
	s.emit(
		asm.FnMapLookupElem.Call(),
		asm.LoadMem(asm.R1, asm.RFP, stackSetKey, asm.Word),
		asm.JNE.Imm(asm.R0, 0, have),
	)
	s.label(miss) // none of the program's sets: the miss entry, always present
	s.emit(asm.StoreImm(asm.RFP, stackSetKey, int64(side), asm.Word))
	setMap(s)
	s.emit(stackPtr(asm.R2, stackSetKey)...)
	s.emit(
		asm.FnMapLookupElem.Call(),
		asm.Mov.Imm(asm.R1, side),
		asm.JNE.Imm(asm.R0, 0, have),
		asm.Mov.Imm(asm.R0, abi.TCActShot),
		asm.Return(),
	)
	s.label(have)
	s.emit(asm.StoreMem(asm.RFP, int16(stackDimPtr+8*d.slot), asm.R0, asm.DWord))
}
