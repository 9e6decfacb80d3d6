package tcbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// State is struct dpd_state.
type State = bpf.DpdDpdState

// skbContext is the head of struct __sk_buff up to ifindex: the fields
// BPF_PROG_TEST_RUN lets a caller set here are mark and ifindex (the
// kernel rejects non-zero values elsewhere). ifindex must name a device in
// the caller's network namespace; the run then sees it as skb->ifindex.
type skbContext struct {
	Len            uint32
	PktType        uint32
	Mark           uint32
	QueueMapping   uint32
	Protocol       uint32
	VlanPresent    uint32
	VlanTCI        uint32
	VlanProto      uint32
	Priority       uint32
	IngressIfindex uint32
	Ifindex        uint32
}

// TraceResult is the outcome of a trace run.
type TraceResult struct {
	Ret     int   // the program's return code (abi.TCActOK, abi.TCActShot)
	Reached bool  // the packet reached the policy stage (State is filled)
	State   State // final dpd_state: verdict, rule_id, flags (abi.St*)
}

// Trace runs the real entry program of dir on frame (an Ethernet frame) as
// if it arrived on ifindex, with the trace mark: the policy always runs
// (conntrack hits are only reported in State.Flags), and nothing is
// written to conntrack or counters.
func (d *Datapath) Trace(ifindex int, dir int, frame []byte) (TraceResult, error) {
	prog, err := d.entryProgram(dir)
	if err != nil {
		return TraceResult{}, fmt.Errorf("trace: %w", err)
	}
	return d.trace(prog, ifindex, frame)
}

// TraceHost is Trace through the host entry program of dir (abi.DirToWEP:
// dpd_hep_in, traffic to the host), for a host interface. Besides what
// Trace reports, State.Flags says abi.StFailsafe for a failsafe port and
// abi.StICMP6ND for exempt ICMPv6 (both pass whatever the policy, which
// still ran); abi.StNoPolicy that nothing polices the packet (forwarded
// without forward policy, or no program in the slot), which passes; and
// Reached false that the interface is not policed at all.
func (d *Datapath) TraceHost(ifindex int, dir int, frame []byte) (TraceResult, error) {
	prog := d.objs.DpdHepOut
	if dir == abi.DirToWEP {
		prog = d.objs.DpdHepIn
	}
	return d.trace(prog, ifindex, frame)
}

func (d *Datapath) trace(prog *ebpf.Program, ifindex int, frame []byte) (TraceResult, error) {
	d.traceMu.Lock()
	defer d.traceMu.Unlock()
	ret, err := runOn(prog, ifindex, abi.TraceMark, frame, 1)
	if err != nil {
		return TraceResult{}, fmt.Errorf("trace: %w", err)
	}
	res := TraceResult{Ret: int(int32(ret))}
	err = d.objs.DpdTrace.Lookup(uint32(0), &res.State)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return TraceResult{}, fmt.Errorf("trace: read result: %w", err)
	}
	res.Reached = res.State.Ifindex != 0
	return res, nil
}

// runOn runs prog over frame with the given skb ifindex and mark.
func runOn(prog *ebpf.Program, ifindex int, mark uint32, frame []byte, repeat uint32) (uint32, error) {
	ctx := skbContext{Mark: mark, Ifindex: uint32(ifindex)}
	return prog.Run(&ebpf.RunOptions{Data: frame, Context: &ctx, Repeat: repeat})
}
