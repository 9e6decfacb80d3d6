package testutil

import (
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// BPFSyscalls counts the bpf(2) calls of this process, with a program on
// the sys_enter raw tracepoint: an independent count of what a piece of
// code asks of BPF maps, whoever wrote it.
type BPFSyscalls struct {
	count *ebpf.Map
}

// NewBPFSyscalls starts counting; the counter goes with tb.
func NewBPFSyscalls(tb testing.TB) *BPFSyscalls {
	tb.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.RawTracepoint,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.FnGetCurrentPidTgid.Call(),
			asm.RSh.Imm(asm.R0, 32),
			asm.JNE.Imm(asm.R0, int32(os.Getpid()), "exit"),
			asm.LoadMem(asm.R1, asm.R6, 8, asm.DWord), // args[1]: the syscall number
			asm.JNE.Imm(asm.R1, unix.SYS_BPF, "exit"),
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "exit"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
			asm.Return(),
		},
	})
	if err != nil {
		tb.Fatalf("load the syscall counter: %v", err)
	}
	tb.Cleanup(func() { _ = prog.Close() })
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: prog})
	if err != nil {
		tb.Fatalf("attach the syscall counter: %v", err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return &BPFSyscalls{count: m}
}

func (c *BPFSyscalls) read(tb testing.TB) uint64 {
	tb.Helper()
	var n uint64
	if err := c.count.Lookup(uint32(0), &n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// During returns how many bpf(2) calls fn made (the count's own reads,
// one at each end, are taken out: each is counted as it enters).
func (c *BPFSyscalls) During(tb testing.TB, fn func()) uint64 {
	tb.Helper()
	before := c.read(tb)
	fn()
	return c.read(tb) - before - 1
}
