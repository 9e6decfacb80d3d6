package polprog

import (
	"fmt"

	"github.com/cilium/ebpf/asm"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Register use. R6 and R9 are callee-saved, so they survive helper calls.
const (
	rCtx   = asm.R6 // the skb, needed for tail calls
	rState = asm.R9 // *dpd_state for the whole program
)

// Stack layout of every chunk. The lookup keys start 4 bytes below an
// 8-byte boundary so their 16-byte address is 8-aligned (the verifier
// insists on aligned stack access).
const (
	stackStateKey = -4  // u32 0: dpd_state index
	stackSrcKey   = -36 // struct dpd_ipset_key for the source address
	stackDstKey   = -68 // struct dpd_ipset_key for the destination address
	stackCtrKey   = -80 // u64 counter id for dpd_rule_ctrs
)

// portProtos are the protocols whose packets carry ports: a rule with port
// matches on a side only matches these.
var portProtos = []uint8{model.ProtoTCP, model.ProtoUDP, model.ProtoSCTP, model.ProtoUDPLite}

// chainRef tags the "r3 = index" instruction of a dpd_chain tail call with
// the target chunk; Load patches in the allocated index.
type chainRef struct{}

func ldState(dst asm.Register, off int, size asm.Size) asm.Instruction {
	return asm.LoadMem(dst, rState, int16(off), size)
}

func ldMap(dst asm.Register, name string) asm.Instruction {
	return asm.LoadMapPtr(dst, 0).WithReference(name)
}

// stackPtr sets dst = fp + off.
func stackPtr(dst asm.Register, off int) []asm.Instruction {
	return []asm.Instruction{asm.Mov.Reg(dst, asm.RFP), asm.Add.Imm(dst, int32(off))}
}

// decide loads the deciding counter id and jumps to the chunk's shared
// tail for the verdict, which stores both and tail-calls the epilogue.
// Sharing the tail keeps a rule's action at three instruction slots.
func decide(s *stream, verdict int32, id uint64) {
	s.emit(asm.LoadImm(asm.R1, int64(id), asm.DWord), asm.Ja.Label(verdictLabel(verdict)))
}

func verdictLabel(verdict int32) string { return fmt.Sprintf("verdict%d", verdict) }
