package polprog

import (
	"testing"

	"github.com/cilium/ebpf/asm"
)

// TestDirectEpilogueEveryCall: each tagged epilogue call of a stream gets
// the constant index 0 in R3 and the epilogue's map, however many there
// are, and no untagged instruction changes.
func TestDirectEpilogueEveryCall(t *testing.T) {
	call := func() asm.Instructions {
		key := tailKey(7)
		for i := range key {
			key[i] = tagEpi(key[i])
		}
		return append(key,
			asm.Mov.Reg(asm.R1, rCtx),
			tagEpi(ldMap(asm.R2, mapJump)),
			asm.FnTailCall.Call(),
		)
	}
	var insns asm.Instructions
	insns = append(insns, asm.Mov.Imm(asm.R3, 9))
	insns = append(insns, call()...)
	insns = append(insns, asm.Mov.Imm(asm.R0, 2), asm.Return())
	insns = append(insns, call()...)
	before := len(insns)

	directEpilogue(insns)

	if len(insns) != before {
		t.Fatalf("%d instructions, want %d", len(insns), before)
	}
	if insns[0].Constant != 9 || insns[0].Dst != asm.R3 {
		t.Errorf("untagged instruction changed: %v", insns[0])
	}
	var calls, r3 int
	for i, ins := range insns {
		if ins.IsBuiltinCall() && ins.Constant == int64(asm.FnTailCall) {
			calls++
			// The index the call sees: the last R3 write before it,
			// after any earlier call (which clobbers R1-R5).
			idx := int64(-1)
			for j := i - 1; j >= 0 && !insns[j].IsBuiltinCall(); j-- {
				if insns[j].Dst == asm.R3 && insns[j].OpCode.ALUOp() == asm.Mov {
					idx = insns[j].Constant
					break
				}
				if insns[j].Dst == asm.R3 {
					t.Fatalf("call %d: R3 still computed at run time by %v", calls, insns[j])
				}
			}
			if idx != 0 {
				t.Errorf("call %d: index %d, want 0", calls, idx)
			}
			r3++
		}
		if ins.IsLoadFromMap() && ins.Reference() != mapEpilogue {
			t.Errorf("map load %d references %q, want %q", i, ins.Reference(), mapEpilogue)
		}
	}
	if calls != 2 || r3 != 2 {
		t.Fatalf("%d tail calls checked, want 2", calls)
	}
}
