package polprog

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf/asm"
)

// item is an instruction or a label naming the next instruction.
type item struct {
	label string // set for labels
	ins   asm.Instruction
}

// stream collects code with symbolic labels. A label may sit where other
// labels already are; assemble turns that into aliases, since an
// asm.Instruction carries only one symbol.
type stream struct {
	items []item
	slots int // instruction slots emitted (upper bound after peephole)
}

func (s *stream) emit(ins ...asm.Instruction) {
	for _, in := range ins {
		s.items = append(s.items, item{ins: in})
		s.slots += int(in.Width())
	}
}

func (s *stream) label(l string) { s.items = append(s.items, item{label: l}) }

// isJa reports an unconditional 16-bit jump.
func isJa(ins *asm.Instruction) bool {
	return ins.OpCode == asm.OpCode(asm.JumpClass).SetJumpOp(asm.Ja)
}

// assemble resolves labels into symbols and drops jumps to the very next
// instruction. References to labels that are not defined here stay as they
// are (the caller checks them).
func assemble(items []item) (asm.Instructions, error) {
	out := make(asm.Instructions, 0, len(items))
	var pending []string
	alias := map[string]string{}
	seen := map[string]bool{}
	for _, it := range items {
		if it.label != "" {
			if seen[it.label] {
				return nil, fmt.Errorf("label %q defined twice", it.label)
			}
			seen[it.label] = true
		}
		if it.label == "" {
			ins := it.ins
			if ins.OpCode == asm.InvalidOpCode {
				return nil, fmt.Errorf("invalid instruction after %d", len(out))
			}
			if len(pending) > 0 {
				ins = ins.WithSymbol(pending[0])
				for _, l := range pending[1:] {
					alias[l] = pending[0]
				}
				pending = pending[:0]
			}
			out = append(out, ins)
			continue
		}
		pending = append(pending, it.label)
		for len(out) > 0 {
			last := &out[len(out)-1]
			if !isJa(last) {
				break
			}
			if slices.Contains(pending, last.Reference()) {
				// "ja L" right before L does nothing; removing it may
				// expose another.
				if sym := last.Symbol(); sym != "" {
					pending = append(pending, sym)
				}
				out = out[:len(out)-1]
				continue
			}
			// "jcc L; ja M; L:" is "jncc M; L:" when nothing jumps to the ja.
			if len(out) > 1 && last.Symbol() == "" {
				prev := &out[len(out)-2]
				if inv, ok := invert(prev); ok && slices.Contains(pending, prev.Reference()) {
					*prev = inv.WithReference(last.Reference())
					out = out[:len(out)-1]
				}
			}
			break
		}
	}
	if len(pending) > 0 {
		return nil, fmt.Errorf("labels %v at end of program", pending)
	}
	for i := range out {
		if !out[i].OpCode.Class().IsJump() {
			continue
		}
		ref := out[i].Reference()
		to, ok := alias[ref]
		for ok { // a removed jump's label may alias a label that became an alias
			ref = to
			to, ok = alias[ref]
		}
		if ref != out[i].Reference() {
			out[i] = out[i].WithReference(ref)
		}
	}
	return out, nil
}

// checkJumps verifies every jump resolves inside insns and fits the 16-bit
// offset field (cilium/ebpf would silently truncate it).
func checkJumps(insns asm.Instructions) error {
	syms := map[string]int{}
	iter := insns.Iterate()
	for iter.Next() {
		if s := iter.Ins.Symbol(); s != "" {
			syms[s] = int(iter.Offset)
		}
	}
	iter = insns.Iterate()
	for iter.Next() {
		ins := iter.Ins
		if !ins.OpCode.Class().IsJump() || ins.Reference() == "" || ins.IsBuiltinCall() {
			continue
		}
		to, ok := syms[ins.Reference()]
		if !ok {
			return fmt.Errorf("insn %d: undefined label %q", iter.Index, ins.Reference())
		}
		if d := to - int(iter.Offset) - 1; d < -32768 || d > 32767 {
			return fmt.Errorf("insn %d: jump to %q out of range (%d)", iter.Index, ins.Reference(), d)
		}
	}
	return nil
}

// inverse jump conditions; JSet has none.
var inverse = map[asm.JumpOp]asm.JumpOp{
	asm.JEq: asm.JNE, asm.JNE: asm.JEq,
	asm.JGT: asm.JLE, asm.JLE: asm.JGT,
	asm.JGE: asm.JLT, asm.JLT: asm.JGE,
	asm.JSGT: asm.JSLE, asm.JSLE: asm.JSGT,
	asm.JSGE: asm.JSLT, asm.JSLT: asm.JSGE,
}

// invert returns the conditional jump with the opposite condition.
func invert(ins *asm.Instruction) (asm.Instruction, bool) {
	class := ins.OpCode.Class()
	if class != asm.JumpClass && class != asm.Jump32Class {
		return asm.Instruction{}, false
	}
	op, ok := inverse[ins.OpCode.JumpOp()]
	if !ok {
		return asm.Instruction{}, false
	}
	out := *ins
	out.OpCode = ins.OpCode.SetJumpOp(op)
	return out, true
}
