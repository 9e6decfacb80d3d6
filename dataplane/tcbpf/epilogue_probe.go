package tcbpf

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// EpilogueCall is how policy programs tail-call the epilogue.
type EpilogueCall uint8

const (
	// EpilogueAuto measures both calls at Open and takes the direct one
	// when it saves at least epilogueMinGain per run.
	EpilogueAuto EpilogueCall = iota
	// EpilogueDirect always uses the epilogue arrays.
	EpilogueDirect
	// EpilogueIndirect always calls dpd_jump[abi.JumpEpilogue].
	EpilogueIndirect
)

// epilogueMinGain is what a direct epilogue call must save per new flow
// to be worth its cost at load: the kernel patches every program that
// direct-calls a filled slot with text_poke (about 0.1 ms per load on the
// benchmark VM). Where indirect jumps need no retpoline the two calls
// cost the same and the patch would buy nothing.
const epilogueMinGain = 3 * time.Nanosecond

// probeRuns is the BPF_PROG_TEST_RUN repeat count of one probe round.
const probeRuns = 20000

// probeTailCalls measures one run of a program that tail-calls a trivial
// program, indirectly (an index the verifier cannot fold) and directly
// (a constant index), the fastest of three rounds each.
func probeTailCalls() (indirect, direct time.Duration, err error) {
	arr, err := ebpf.NewMap(&ebpf.MapSpec{Name: "dpd_tcprobe", Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return 0, 0, fmt.Errorf("probe tail calls: %w", err)
	}
	defer func() { _ = arr.Close() }()
	load := func(insns asm.Instructions) (*ebpf.Program, error) {
		return ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "Dual BSD/GPL", Instructions: insns})
	}
	target, err := load(asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()})
	if err != nil {
		return 0, 0, fmt.Errorf("probe tail calls: %w", err)
	}
	defer func() { _ = target.Close() }()
	if err := arr.Update(uint32(0), target, ebpf.UpdateAny); err != nil {
		return 0, 0, fmt.Errorf("probe tail calls: %w", err)
	}
	caller := func(key asm.Instructions) asm.Instructions {
		return append(append(asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)}, key...),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, arr.FD()),
			asm.FnTailCall.Call(),
			asm.Mov.Imm(asm.R0, 2),
			asm.Return())
	}
	keys := []asm.Instructions{
		{ // skb->len - skb->len: the verifier cannot fold it
			asm.LoadMem(asm.R3, asm.R6, 0, asm.Word),
			asm.LoadMem(asm.R4, asm.R6, 0, asm.Word),
			asm.Sub.Reg(asm.R3, asm.R4),
		},
		{asm.Mov.Imm(asm.R3, 0)},
	}
	var best [2]time.Duration
	frame := make([]byte, 64)
	for i, key := range keys {
		p, err := load(caller(key))
		if err != nil {
			return 0, 0, fmt.Errorf("probe tail calls: %w", err)
		}
		for range 3 {
			ret, d, err := p.Benchmark(frame, probeRuns, nil)
			if err == nil && ret != 0 {
				err = errors.New("the tail call did not reach its target")
			}
			if err != nil {
				_ = p.Close()
				return 0, 0, fmt.Errorf("probe tail calls: %w", err)
			}
			if best[i] == 0 || d < best[i] {
				best[i] = d
			}
		}
		_ = p.Close()
	}
	return best[0], best[1], nil
}

// chooseEpilogueCall decides whether policy programs call the epilogue
// directly (the epilogue arrays) and says why; decided is false when the
// probe failed and indirect calls are a fallback, not a finding.
func chooseEpilogueCall(mode EpilogueCall) (direct bool, why string, decided bool) {
	switch mode {
	case EpilogueDirect:
		return true, "configured", true
	case EpilogueIndirect:
		return false, "configured", true
	}
	in, dir, err := probeTailCalls()
	if err != nil {
		return false, err.Error(), false
	}
	gain := in - dir
	// BPF_PROG_TEST_RUN reports whole nanoseconds per run.
	return gain >= epilogueMinGain, fmt.Sprintf("indirect tail call %v, direct %v per run", in, dir), true
}

// ProbeEpilogueCall is what Open with EpilogueAuto chooses on this machine
// when no earlier dpd pinned a choice (benchmarks measure the policy
// programs the way a fresh node runs them).
func ProbeEpilogueCall() (direct bool, why string) {
	direct, why, _ = chooseEpilogueCall(EpilogueAuto)
	return direct, why
}
