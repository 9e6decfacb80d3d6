package tcbpf

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

var testSeq atomic.Uint32

// testPinDir is a fresh pin directory under bpffs, removed (with every map
// and link pinned in it) when the test ends.
func testPinDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpdtest-%d-%d", os.Getpid(), testSeq.Add(1)))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// openTest opens a Datapath on a fresh pin directory with small maps.
func openTest(t testing.TB, opts Options) *Datapath {
	t.Helper()
	testutil.RequirePrivileged(t)
	if opts.PinDir == "" {
		opts.PinDir = testPinDir(t)
	}
	if opts.Sizes == (MapSizes{}) {
		opts.Sizes = MapSizes{Conntrack: 1024, IPSets: 1024, IfState: 64, RuleCounters: 256, Chain: 64}
	}
	d, err := Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// vethPair creates a veth pair in the current namespace (the test-run
// context may only name devices that exist) and returns both ifindexes.
func vethPair(t testing.TB) (int, int) {
	t.Helper()
	return vethPairAt(t, 0)
}

// vethPairAt is vethPair with the first end at ifindex index (0: the
// kernel's choice).
func vethPairAt(t testing.TB, index int) (int, int) {
	t.Helper()
	n := testSeq.Add(1)
	a := fmt.Sprintf("dpdr%d_%da", os.Getpid()%10000, n)
	b := fmt.Sprintf("dpdr%d_%db", os.Getpid()%10000, n)
	la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a, Index: index}, PeerName: b}
	if err := netlink.LinkAdd(la); err != nil {
		t.Fatalf("add veth %s: %v", a, err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(la) })
	ia, err := netlink.LinkByName(a)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := netlink.LinkByName(b)
	if err != nil {
		t.Fatal(err)
	}
	if index != 0 && ia.Attrs().Index != index {
		t.Fatalf("veth %s got ifindex %d, want %d", a, ia.Attrs().Index, index)
	}
	return ia.Attrs().Index, ib.Attrs().Index
}

// verdictProg is a stand-in policy program: it writes verdict and rule id
// into dpd_state and tail-calls the epilogue, as compiled policies do.
func verdictProg(t testing.TB, d *Datapath, verdict int32, ruleID uint64) *ebpf.Program {
	t.Helper()
	m := d.Maps()
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, m.State.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.StoreImm(asm.R0, abi.StateVerdict, int64(verdict), asm.Word),
		asm.LoadImm(asm.R1, int64(ruleID), asm.DWord),
		asm.StoreMem(asm.R0, abi.StateRuleID, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, m.Jump.FD()),
		asm.Mov.Imm(asm.R3, abi.JumpEpilogue),
		asm.FnTailCall.Call(),
		asm.Mov.Imm(asm.R0, abi.TCActShot).WithSymbol("out"),
		asm.Return(),
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "test_verdict", Type: ebpf.SchedCLS, Instructions: insns, License: "Dual BSD/GPL",
	})
	if err != nil {
		t.Fatalf("load verdict program: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// trivialProg returns TC_ACT_OK: the baseline of the cost measurement.
func trivialProg(t testing.TB) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "test_ok", Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, abi.TCActOK), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load trivial program: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Packet crafting. Checksums are left zero: the programs do not check them.

const (
	ethIPv4 = 0x0800
	ethARP  = 0x0806
	ethIPv6 = 0x86dd

	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

var (
	ipA = netip.MustParseAddr("10.65.0.1")
	ipB = netip.MustParseAddr("10.65.0.2")
)

func ether(typ uint16, payload []byte) []byte {
	f := make([]byte, 14, 14+len(payload))
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 0x02})
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0x01})
	binary.BigEndian.PutUint16(f[12:], typ)
	return append(f, payload...)
}

func ipv4(src, dst netip.Addr, proto uint8, l4 []byte) []byte {
	h := make([]byte, 20, 20+len(l4))
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
	h[8] = 64
	h[9] = proto
	s, d := src.As4(), dst.As4()
	copy(h[12:16], s[:])
	copy(h[16:20], d[:])
	return ether(ethIPv4, append(h, l4...))
}

func tcpPkt(src, dst netip.Addr, sport, dport uint16, flags byte) []byte {
	l4 := make([]byte, 20)
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	l4[12] = 5 << 4
	l4[13] = flags
	return ipv4(src, dst, 6, l4)
}

func udpPkt(src, dst netip.Addr, sport, dport uint16) []byte {
	l4 := make([]byte, 8+4)
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	binary.BigEndian.PutUint16(l4[4:], 12)
	return ipv4(src, dst, 17, l4)
}

func icmpEcho(src, dst netip.Addr, typ uint8, id uint16) []byte {
	l4 := make([]byte, 8)
	l4[0] = typ
	binary.BigEndian.PutUint16(l4[4:], id)
	return ipv4(src, dst, 1, l4)
}

func arpPkt() []byte  { return ether(ethARP, make([]byte, 28)) }
func ipv6Pkt() []byte { return ether(ethIPv6, append([]byte{0x60}, make([]byte, 39)...)) }

// icmpErr is an ICMP destination-unreachable/fragmentation-needed from src
// to dst quoting the IP packet of frame (an Ethernet frame).
func icmpErr(src, dst netip.Addr, frame []byte) []byte {
	l4 := make([]byte, 8, 8+28)
	l4[0], l4[1] = 3, 4
	binary.BigEndian.PutUint16(l4[6:], 1400)
	return ipv4(src, dst, 1, append(l4, frame[14:14+28]...))
}

// outboundOnly is one end of a new veth pair as workload slot 1, ready,
// whose egress policy allows everything (rule allowRule) and whose ingress
// denies everything (rule denyRule): only conntrack lets replies in.
func outboundOnly(t *testing.T, d *Datapath, allowRule, denyRule uint64) int {
	t.Helper()
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, allowRule)))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, verdictProg(t, d, abi.VerdictDeny, denyRule)))
	return ifA
}
