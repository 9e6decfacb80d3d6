package polprog

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// span is the blocks [lo, hi) of one chunk.
type span struct{ lo, hi int }

// split assigns consecutive blocks to chunks of at most budget slots
// (estimated; reserve covers the chunk's own prologue, dispatch and stubs).
// A block larger than a chunk gets a chunk of its own.
func split(codes []blockCode, budget, reserve int) []span {
	var out []span
	lo, size := 0, 0
	for i := range codes {
		n := codes[i].s.slots
		if i > lo && size+n > budget-reserve {
			out = append(out, span{lo, i})
			lo, size = i, 0
		}
		size += n
	}
	return append(out, span{lo, len(codes)})
}

// parseBlockLabel returns N for "b<N>" (a block start), else -1.
func parseBlockLabel(l string) int {
	if !strings.HasPrefix(l, "b") || strings.Contains(l, ".") {
		return -1
	}
	n, err := strconv.Atoi(l[1:])
	if err != nil {
		return -1
	}
	return n
}

func stubLabel(x int) string { return fmt.Sprintf("x%d", x) }

func callLabel(c int) string { return fmt.Sprintf("call%d", c) }

// chunkBody is a chunk's blocks with jumps to blocks of other chunks
// redirected to stubs.
type chunkBody struct {
	span
	items []item
	needs needs
	stubs []int // blocks of other chunks this chunk continues at
}

func makeBody(sp span, codes []blockCode, last bool) chunkBody {
	cb := chunkBody{span: sp}
	for i := sp.lo; i < sp.hi; i++ {
		cb.items = append(cb.items, codes[i].s.items...)
		cb.needs.merge(codes[i].needs)
	}
	if !last {
		cb.items = append(cb.items, item{ins: asm.Ja.Label(blockLabel(sp.hi))})
	}
	seen := map[int]bool{}
	for i := range cb.items {
		ins := &cb.items[i].ins
		if cb.items[i].label != "" || !ins.OpCode.Class().IsJump() {
			continue
		}
		x := parseBlockLabel(ins.Reference())
		if x < 0 || (x >= sp.lo && x < sp.hi) {
			continue
		}
		*ins = ins.WithReference(stubLabel(x))
		if !seen[x] {
			seen[x] = true
			cb.stubs = append(cb.stubs, x)
		}
	}
	slices.Sort(cb.stubs)
	return cb
}

// assembleChunk wraps a body with the chunk prologue, the chain_pos
// dispatch (continuation chunks), the stubs that tail-call other chunks and
// the verdict and epilogue tails.
func (p *plan) assembleChunk(idx int, cb chunkBody, entries []int, chunkOf []int) (asm.Instructions, error) {
	var s stream
	p.prologue(&s, idx == 0, cb.needs)
	if idx > 0 {
		// Resume where the previous chunk stopped; an unknown position
		// fails closed.
		s.emit(ldState(asm.R1, abi.StateChainPos, asm.Word))
		dispatch(&s, entries)
	}
	s.items = append(s.items, cb.items...)
	// A stub records where to resume; the stubs into one chunk share its
	// tail call.
	var targets []int
	for _, x := range cb.stubs {
		s.label(stubLabel(x))
		s.emit(
			asm.StoreImm(rState, abi.StateChainPos, int64(x), asm.Word),
			asm.Ja.Label(callLabel(chunkOf[x])),
		)
		if !slices.Contains(targets, chunkOf[x]) {
			targets = append(targets, chunkOf[x])
		}
	}
	for _, c := range targets {
		key := tailKey(0)
		key[len(key)-1].Metadata.Set(chainRef{}, c)
		s.label(callLabel(c))
		s.emit(key...)
		s.emit(
			asm.Mov.Reg(asm.R1, rCtx),
			ldMap(asm.R2, mapChain),
			asm.FnTailCall.Call(),
			asm.Mov.Imm(asm.R0, abi.TCActShot),
			asm.Return(),
		)
	}
	if idx > 0 {
		s.label(labelBadPos)
		decide(&s, abi.VerdictDeny, p.rules[len(p.rules)-1].CounterID)
	}
	tails(&s)
	insns, err := assemble(dce(s.items))
	if err != nil {
		return nil, err
	}
	if err := checkJumps(insns); err != nil {
		return nil, fmt.Errorf("chunk %d (blocks %d-%d): %w", idx, cb.lo, cb.hi-1, err)
	}
	return insns, nil
}

// dispatch jumps to block R1 of entries (sorted), or to labelBadPos: a
// linear scan for a few entries, a binary search for more.
func dispatch(s *stream, entries []int) {
	if len(entries) <= 8 {
		for _, x := range entries {
			s.emit(asm.JEq.Imm(asm.R1, int32(x), blockLabel(x)))
		}
		s.emit(asm.Ja.Label(labelBadPos))
		return
	}
	mid := len(entries) / 2
	right := fmt.Sprintf("dispatch%d", entries[mid])
	s.emit(asm.JGE.Imm(asm.R1, int32(entries[mid]), right))
	dispatch(s, entries[:mid])
	s.label(right)
	dispatch(s, entries[mid:])
}

// prologue finds dpd_state (R9), keeps the skb (R6), resets the memo in the
// head and builds the lookup key templates the chunk's blocks use.
func (p *plan) prologue(s *stream, head bool, n needs) {
	s.emit(
		asm.Mov.Reg(rCtx, asm.R1),
		asm.StoreImm(asm.RFP, stackStateKey, 0, asm.Word),
		ldMap(asm.R1, mapState),
	)
	s.emit(stackPtr(asm.R2, stackStateKey)...)
	s.emit(
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "have_state"),
		asm.Mov.Imm(asm.R0, abi.TCActShot),
		asm.Return(),
	)
	s.label("have_state")
	s.emit(asm.Mov.Reg(rState, asm.R0))
	if head && (len(p.memo) > 0 || p.idx != nil) {
		// Facts are per packet; the entry zeroes pol_scratch too, but the
		// head must not trust a stale value.
		s.emit(asm.Mov.Imm(asm.R1, 0))
		for w := range 4 {
			s.emit(asm.StoreMem(rState, int16(abi.StatePolScratch+8*w), asm.R1, asm.DWord))
		}
	}
	lazy := head && p.idx != nil && p.idx.start > 0 // classified after the linear head
	if head && p.idx != nil && !lazy {
		p.classify(s, "")
	}
	if n.walk && !lazy {
		p.bitmapPtrs(s, "", head)
	}
	if !n.srcKey && !n.dstKey {
		return
	}
	// The address and family of a key are fixed per packet; set tests only
	// write set_id, proto and port.
	s.emit(
		ldState(asm.R3, abi.StateFamily, asm.Byte),
		asm.Mov.Reg(asm.R1, asm.R3),
		asm.Mov.Imm(asm.R2, abi.IPSetKeyFixedBits+32),
		asm.JNE.Imm(asm.R1, 6, "have_plen"),
		asm.Mov.Imm(asm.R2, abi.IPSetKeyFixedBits+128),
	)
	s.label("have_plen")
	for _, k := range []struct {
		need      bool
		key, addr int
	}{{n.srcKey, stackSrcKey, abi.StateSaddr}, {n.dstKey, stackDstKey, abi.StateDaddr}} {
		if !k.need {
			continue
		}
		s.emit(
			asm.StoreMem(asm.RFP, int16(k.key+abi.IPSetKeyPrefixLen), asm.R2, asm.Word),
			asm.StoreMem(asm.RFP, int16(k.key+abi.IPSetKeyFamily), asm.R3, asm.Byte),
			ldState(asm.R1, k.addr, asm.DWord),
			asm.StoreMem(asm.RFP, int16(k.key+abi.IPSetKeyAddr), asm.R1, asm.DWord),
			ldState(asm.R1, k.addr+8, asm.DWord),
			asm.StoreMem(asm.RFP, int16(k.key+abi.IPSetKeyAddr+8), asm.R1, asm.DWord),
		)
	}
}

// tails emits the shared verdict tails (R1 holds the deciding counter id)
// and the epilogue tail call, which returns TC_ACT_SHOT if it fails.
func tails(s *stream) {
	for _, v := range []int32{abi.VerdictAllow, abi.VerdictDeny} {
		s.label(verdictLabel(v))
		s.emit(
			asm.StoreImm(rState, abi.StateVerdict, int64(v), asm.Word),
			asm.StoreMem(rState, abi.StateRuleID, asm.R1, asm.DWord),
			asm.Ja.Label(labelEpilogue),
		)
	}
	s.label(labelEpilogue)
	key := tailKey(abi.JumpEpilogue)
	for i := range key {
		key[i] = tagEpi(key[i])
	}
	s.emit(key...)
	s.emit(
		asm.Mov.Reg(asm.R1, rCtx),
		tagEpi(ldMap(asm.R2, mapJump)),
		asm.FnTailCall.Call(),
		asm.Mov.Imm(asm.R0, abi.TCActShot),
		asm.Return(),
	)
}

// epiRef tags the epilogue tail call's index and map instructions. Load
// turns them into a direct tail call into Maps.Epilogue[0] when the caller
// gives one; otherwise they stay an indirect call into dpd_jump.
type epiRef struct{}

func tagEpi(ins asm.Instruction) asm.Instruction {
	ins.Metadata.Set(epiRef{}, true)
	return ins
}

// directEpilogue rewrites the tagged epilogue call of insns into a direct
// tail call: the index becomes the constant 0 (the same number of
// instructions, so no offset moves) and the map mapEpilogue. Under
// retpolines an indirect tail call costs about 10 ns per new flow, a
// direct one about 1 ns. The kernel tracks every program that
// direct-calls a prog array: a load, a close and every write to that array
// walk the list of those programs (and a write patches their text), which
// is why the epilogue gets small arrays of its own rather than dpd_jump's
// slot.
// Each call's tagged instructions are contiguous: the first of a run sets
// the index, the rest become harmless moves, so a stream with several
// epilogue calls gets every one of them right.
func directEpilogue(insns asm.Instructions) {
	prevTagged := false
	for i := range insns {
		ins := &insns[i]
		tagged := ins.Metadata.Get(epiRef{}) != nil
		first := tagged && !prevTagged
		prevTagged = tagged
		if !tagged {
			continue
		}
		if ins.IsLoadFromMap() {
			*ins = ins.WithReference(mapEpilogue)
			continue
		}
		mov := asm.Mov.Imm(asm.R4, 0)
		if first {
			mov = asm.Mov.Imm(asm.R3, 0)
		}
		ins.OpCode, ins.Dst, ins.Src, ins.Offset, ins.Constant = mov.OpCode, mov.Dst, mov.Src, mov.Offset, mov.Constant
	}
}

// tailKey sets R3 (a tail call's index) to key in a way the verifier cannot
// prove constant: skb->len - skb->len + key. With a constant index the JIT
// emits a direct tail call, which the kernel patches into the program with
// text_poke under the global text_mutex at load, and again in every such
// program at each update of that prog-array slot: it doubled the cost of a
// load here and made jump writes cost O(programs). The indirect call costs
// a few nanoseconds per new flow (policy runs only for those). The last
// instruction carries the index (chainRef relocations patch it).
func tailKey(key int32) []asm.Instruction {
	return []asm.Instruction{
		asm.LoadMem(asm.R3, rCtx, 0, asm.Word),
		asm.LoadMem(asm.R4, rCtx, 0, asm.Word),
		asm.Sub.Reg(asm.R3, asm.R4),
		asm.Add.Imm(asm.R3, key),
	}
}

// dce drops instructions no path from the first one reaches: the verifier
// rejects unreachable code, and the emitters may produce some (a match that
// can never succeed, an epilogue no rule jumps to).
func dce(items []item) []item {
	pos := map[string]int{}
	for i, it := range items {
		if it.label != "" {
			pos[it.label] = i
		}
	}
	reach := make([]bool, len(items))
	work := []int{0}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
	walk:
		for ; i < len(items) && !reach[i]; i++ {
			reach[i] = true
			ins := &items[i].ins
			if items[i].label != "" || !ins.OpCode.Class().IsJump() {
				continue
			}
			switch op := ins.OpCode.JumpOp(); op {
			case asm.Exit:
				break walk
			case asm.Call:
				continue
			default:
				if t, ok := pos[ins.Reference()]; ok {
					work = append(work, t)
				}
				if op == asm.Ja {
					break walk
				}
			}
		}
	}
	out := items[:0:0]
	for i, it := range items {
		if reach[i] {
			out = append(out, it)
		}
	}
	return out
}
