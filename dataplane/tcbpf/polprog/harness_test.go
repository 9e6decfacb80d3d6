package polprog

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// stateValue mirrors struct dpd_state.
type stateValue struct {
	Saddr, Daddr       [16]byte
	Sport, Dport       uint16
	Proto, Family      uint8
	ICMPType, ICMPCode uint8
	Ifindex, Dir       uint32
	Verdict, ChainPos  uint32
	RuleID             uint64
	PolScratch         [4]uint64
	PktLen, Flags      uint32
	Trace              uint64
	// Fields appended to dpd_state after trace (NAT facts, route class);
	// the policy programs do not read them.
	Tail [abi.StateSize - abi.StateTrace - 8]byte
}

// resultValue is what the test epilogue copies out of dpd_state.
type resultValue struct {
	Verdict, ChainPos uint32
	RuleID            uint64
	PolScratch        [4]uint64
}

// pkt is a packet as the entry program would have parsed it.
type pkt struct {
	src, dst     netip.Addr
	sport, dport uint16
	proto        uint8
	icmpType     uint8
	icmpCode     uint8
	trace        bool
}

const testPktLen = 100

func (p pkt) state() stateValue {
	var s stateValue
	src, dst := p.src.As16(), p.dst.As16()
	s.Family = 6
	if p.src.Is4() {
		s.Family = 4
		a, b := p.src.As4(), p.dst.As4()
		copy(src[:], append(a[:], make([]byte, 12)...))
		copy(dst[:], append(b[:], make([]byte, 12)...))
	}
	s.Saddr, s.Daddr = src, dst
	s.Sport, s.Dport, s.Proto = p.sport, p.dport, p.proto
	s.ICMPType, s.ICMPCode = p.icmpType, p.icmpCode
	s.PktLen = testPktLen
	if p.trace {
		s.Trace = 1
	}
	return s
}

// harness owns the maps a policy program needs, laid out as in dpd_abi.h,
// and a test epilogue that copies the verdict out and returns 100+verdict.
type harness struct {
	t      testing.TB
	maps   Maps
	result *ebpf.Map
	ncpu   int
	// members of every set, to rebuild dpd_ipset_idx from scratch (a
	// reference independent of dataplane/tcbpf's incremental index).
	members map[uint32][]netip.Prefix
	// bulk defers rebuildIndex until the caller runs it (many members).
	bulk bool
	// setIdx keeps dpd_ipset_idx and the programs' set maps.
	setIdx *testSetIndex
}

// Returns of the test epilogue; anything else (TC_ACT_SHOT) means a tail
// call failed.
const (
	retAllow = 100 + abi.VerdictAllow
	retDeny  = 100 + abi.VerdictDeny
)

func newHarness(t testing.TB) *harness {
	testutil.RequirePrivileged(t)
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ncpu: ncpu}
	mk := func(s *ebpf.MapSpec) *ebpf.Map {
		m, err := ebpf.NewMap(s)
		if err != nil {
			t.Fatalf("create map %s: %v", s.Name, err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	h.maps = Maps{
		State: mk(&ebpf.MapSpec{Name: abi.MapState, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: abi.StateSize, MaxEntries: 1}),
		Jump:  mk(&ebpf.MapSpec{Name: abi.MapJump, Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 64}),
		IPSets: mk(&ebpf.MapSpec{Name: abi.MapIPSets, Type: ebpf.LPMTrie, KeySize: abi.IPSetKeySize, ValueSize: 4,
			MaxEntries: 32768, Flags: unix.BPF_F_NO_PREALLOC}),
		RuleCtrs: mk(&ebpf.MapSpec{Name: abi.MapRuleCtrs, Type: ebpf.PerCPUHash, KeySize: 8, ValueSize: abi.CounterSize, MaxEntries: 65536}),
		Chain:    mk(&ebpf.MapSpec{Name: abi.MapChain, Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 256}),
		IPSetIdx: mk(&ebpf.MapSpec{Name: abi.MapIPSetIdx, Type: ebpf.LPMTrie, KeySize: abi.IPSetIdxKeySize,
			ValueSize: 4, MaxEntries: 65536, Flags: unix.BPF_F_NO_PREALLOC}),
	}
	h.maps.IPSetIdxHash = mk(&ebpf.MapSpec{Name: abi.MapIPSetIdxHash, Type: ebpf.Hash, KeySize: abi.IPSetIdxKeySize,
		ValueSize: 4, MaxEntries: 65536, Flags: unix.BPF_F_NO_PREALLOC})
	h.setIdx = newTestSetIndex(t, h.maps.IPSetIdx, h.maps.IPSetIdxHash)
	h.maps.SetIndex = h.setIdx
	h.members = map[uint32][]netip.Prefix{}
	h.result = mk(&ebpf.MapSpec{Name: "pol_test_res", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(unsafe.Sizeof(resultValue{})), MaxEntries: 1})
	epi, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "pol_test_epi", Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: h.epilogueInsns()})
	if err != nil {
		t.Fatalf("load test epilogue: %v", err)
	}
	t.Cleanup(func() { epi.Close() })
	if err := h.maps.Jump.Update(uint32(abi.JumpEpilogue), epi, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	// The epilogue array production gives the programs (direct tail call);
	// tests of the indirect call through dpd_jump clear maps.Epilogue.
	h.maps.Epilogue = mk(&ebpf.MapSpec{Name: "dpd_epi", Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err := h.maps.Epilogue.Update(uint32(0), epi, ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	return h
}

// productionEpilogue makes the programs call the epilogue the way
// dataplane/tcbpf chooses on this machine: directly when that is cheaper
// per run, else through dpd_jump.
func (h *harness) productionEpilogue(b *testing.B) {
	direct, why := tcbpf.ProbeEpilogueCall()
	b.Logf("epilogue call: direct %v (%s)", direct, why)
	if !direct {
		h.maps.Epilogue = nil
	}
}

// epilogueInsns: result = {verdict, chain_pos, rule_id, pol_scratch}; return 100 + verdict.
func (h *harness) epilogueInsns() asm.Instructions {
	insns := asm.Instructions{
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, h.maps.State.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "st"),
		asm.Mov.Imm(asm.R0, 90), asm.Return(),
		asm.Mov.Reg(asm.R7, asm.R0).WithSymbol("st"),
		asm.LoadMapPtr(asm.R1, h.result.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "res"),
		asm.Mov.Imm(asm.R0, 91), asm.Return(),
		asm.LoadMem(asm.R1, asm.R7, abi.StateVerdict, asm.Word).WithSymbol("res"),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, abi.StateChainPos, asm.Word),
		asm.StoreMem(asm.R0, 4, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, abi.StateRuleID, asm.DWord),
		asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord),
	}
	for w := range 4 {
		insns = append(insns,
			asm.LoadMem(asm.R1, asm.R7, int16(abi.StatePolScratch+8*w), asm.DWord),
			asm.StoreMem(asm.R0, int16(16+8*w), asm.R1, asm.DWord))
	}
	return append(insns,
		asm.LoadMem(asm.R0, asm.R7, abi.StateVerdict, asm.Word),
		asm.Add.Imm(asm.R0, 100),
		asm.Return())
}

// resolver is a Resolver over a fixed name -> id table.
type resolver map[string]uint32

func (r resolver) SetID(n string) (uint32, bool) { id, ok := r[n]; return id, ok }

// addMember inserts one member into set id (proto/port only for IP_AND_PORT sets).
func (h *harness) addMember(id uint32, pfx netip.Prefix, proto uint8, port uint16) {
	h.t.Helper()
	key := make([]byte, abi.IPSetKeySize)
	bits := pfx.Bits()
	binary.NativeEndian.PutUint32(key[abi.IPSetKeyPrefixLen:], uint32(abi.IPSetKeyFixedBits+bits))
	binary.NativeEndian.PutUint32(key[abi.IPSetKeySetID:], id)
	key[abi.IPSetKeyProto] = proto
	key[abi.IPSetKeyFamily] = family(pfx.Addr())
	binary.BigEndian.PutUint16(key[abi.IPSetKeyPort:], port)
	copy(key[abi.IPSetKeyAddr:], pfx.Masked().Addr().AsSlice())
	if err := h.maps.IPSets.Update(key, uint32(1), ebpf.UpdateAny); err != nil {
		h.t.Fatalf("add member %v to set %d: %v", pfx, id, err)
	}
	if proto == 0 && port == 0 {
		h.members[id] = append(h.members[id], pfx.Masked())
		if !h.bulk {
			h.rebuildIndex()
		}
	}
}

// family is the key family of a: 4 or 6.
func family(a netip.Addr) uint8 {
	if a.Is4() {
		return 4
	}
	return 6
}

// rebuildIndex brings dpd_ipset_idx up to date with h.members.
func (h *harness) rebuildIndex() {
	h.t.Helper()
	h.setIdx.t = h.t
	h.setIdx.rebuild(h.members)
}

// load compiles and loads pol, closing the program at cleanup.
func (h *harness) load(pol *model.DirectionPolicy, r Resolver, opts Options) *Program {
	h.t.Helper()
	spec, err := Compile(pol, model.Ingress, r, opts)
	if err != nil {
		h.t.Fatalf("compile: %v", err)
	}
	prog, err := spec.Load(h.maps)
	if err != nil {
		h.t.Fatalf("load: %v", err)
	}
	h.t.Cleanup(func() {
		if err := prog.Close(); err != nil {
			h.t.Errorf("close: %v", err)
		}
	})
	return prog
}

func (h *harness) setState(p pkt) {
	h.t.Helper()
	vals := make([]stateValue, h.ncpu)
	for i := range vals {
		vals[i] = p.state()
	}
	if err := h.maps.State.Update(uint32(0), vals, ebpf.UpdateAny); err != nil {
		h.t.Fatalf("set state: %v", err)
	}
	if err := h.result.Update(uint32(0), resultValue{}, ebpf.UpdateAny); err != nil {
		h.t.Fatalf("reset result: %v", err)
	}
}

// frame is a minimal Ethernet frame; the policy only reads dpd_state.
var frame = make([]byte, 64)

// run runs prog for p and returns the program's return code and the state
// the epilogue saw.
func (h *harness) run(prog *Program, p pkt) (uint32, resultValue) {
	h.t.Helper()
	h.setState(p)
	ret, err := prog.Head().Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		h.t.Fatalf("run: %v", err)
	}
	var res resultValue
	if err := h.result.Lookup(uint32(0), &res); err != nil {
		h.t.Fatalf("read result: %v", err)
	}
	return ret, res
}

// counter sums a rule counter over CPUs.
func (h *harness) counter(id uint64) (packets, bytes uint64) {
	h.t.Helper()
	var vals []counterValue
	if err := h.maps.RuleCtrs.Lookup(id, &vals); err != nil {
		h.t.Fatalf("read counter %x: %v", id, err)
	}
	for _, v := range vals {
		packets += v.Packets
		bytes += v.Bytes
	}
	return packets, bytes
}

// describe names a RuleInfo the way test tables expect it.
func describe(ri RuleInfo) string {
	switch ri.Synthetic {
	case SyntheticTierDefault:
		return "default:" + ri.Tier
	case SyntheticNoMatch:
		return "no-match"
	}
	return fmt.Sprintf("%s#%d", ri.Policy, ri.Index)
}

// ruleName finds the RuleInfo of a counter id.
func ruleName(rules []RuleInfo, id uint64) string {
	for _, ri := range rules {
		if ri.CounterID == id {
			return describe(ri)
		}
	}
	return fmt.Sprintf("unknown(%x)", id)
}

func TestStateLayout(t *testing.T) {
	var s stateValue
	checks := []struct {
		name      string
		got, want uintptr
	}{
		{"size", unsafe.Sizeof(s), abi.StateSize},
		{"daddr", unsafe.Offsetof(s.Daddr), abi.StateDaddr},
		{"sport", unsafe.Offsetof(s.Sport), abi.StateSport},
		{"dport", unsafe.Offsetof(s.Dport), abi.StateDport},
		{"proto", unsafe.Offsetof(s.Proto), abi.StateProto},
		{"family", unsafe.Offsetof(s.Family), abi.StateFamily},
		{"icmp_type", unsafe.Offsetof(s.ICMPType), abi.StateICMPType},
		{"icmp_code", unsafe.Offsetof(s.ICMPCode), abi.StateICMPCode},
		{"verdict", unsafe.Offsetof(s.Verdict), abi.StateVerdict},
		{"chain_pos", unsafe.Offsetof(s.ChainPos), abi.StateChainPos},
		{"rule_id", unsafe.Offsetof(s.RuleID), abi.StateRuleID},
		{"pol_scratch", unsafe.Offsetof(s.PolScratch), abi.StatePolScratch},
		{"pkt_len", unsafe.Offsetof(s.PktLen), abi.StatePktLen},
		{"trace", unsafe.Offsetof(s.Trace), abi.StateTrace},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: test mirror has %d, abi %d", c.name, c.got, c.want)
		}
	}
}
