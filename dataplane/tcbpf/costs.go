package tcbpf

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// KernelCosts are what the attach-relevant kernel operations cost on the
// running kernel, measured on a scratch device. They differ by an order of
// magnitude between kernel builds of one series (a TCX first attach and last
// detach each wait for an RCU grace period on some), so the attach mode is
// chosen from them rather than assumed.
type KernelCosts struct {
	// TCXFirstAttach attaches the first program of a hook; TCXLastDetach
	// removes it again. Both wait for an RCU grace period on some kernels.
	TCXFirstAttach, TCXLastDetach time.Duration
	// TCXNextAttach attaches a second program to a hook that has one.
	TCXNextAttach time.Duration
	// LegacyAttach adds a clsact qdisc and one direct-action cls_bpf filter.
	LegacyAttach time.Duration
	// ProgramLoad loads (verifies, JITs) a trivial SchedCLS program.
	ProgramLoad time.Duration
	// MapUpdate is one hash-map element update from userspace.
	MapUpdate time.Duration
	// TCXErr is why TCX could not be measured (unsupported kernel), or nil.
	TCXErr error
}

// probeDevice is the scratch interface of MeasureKernelCosts; dpd's monitor
// only looks at workload prefixes, so it never sees it.
const (
	probeDevice = "dpdprobe0"
	probePeer   = "dpdprobe1"
)

// costRounds: each cost is the median of this many tries, so one
// preemption on a busy node does not decide the attach mode.
const costRounds = 3

// MeasureKernelCosts measures KernelCosts on a scratch veth pair it creates
// and deletes. It needs CAP_NET_ADMIN and CAP_BPF.
func MeasureKernelCosts() (KernelCosts, error) {
	var c KernelCosts
	spec := &ebpf.ProgramSpec{
		Name: "dpd_probe", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	}
	var progs [2]*ebpf.Program
	loads := make([]time.Duration, 0, costRounds)
	for i := 0; i < costRounds; i++ {
		t := time.Now()
		p, err := ebpf.NewProgram(spec)
		if err != nil {
			closeAll(progs[:])
			return c, fmt.Errorf("load probe program: %w", err)
		}
		loads = append(loads, time.Since(t))
		if i < len(progs) {
			progs[i] = p
		} else {
			_ = p.Close()
		}
	}
	defer closeAll(progs[:])
	c.ProgramLoad = median(loads)

	var err error
	if c.MapUpdate, err = measureMapUpdate(); err != nil {
		return c, err
	}

	dev, err := newProbeDevice()
	if err != nil {
		return c, err
	}
	defer func() { _ = netlink.LinkDel(dev) }()
	ifindex := dev.Attrs().Index

	c.TCXFirstAttach, c.TCXNextAttach, c.TCXLastDetach, c.TCXErr = measureTCX(ifindex, progs)
	if c.LegacyAttach, err = measureLegacy(dev, progs[0]); err != nil {
		return c, err
	}
	return c, nil
}

func closeAll(ps []*ebpf.Program) {
	for _, p := range ps {
		if p != nil {
			_ = p.Close()
		}
	}
}

func newProbeDevice() (netlink.Link, error) {
	// A leftover from a probe that was killed is reused after a delete.
	if old, err := netlink.LinkByName(probeDevice); err == nil {
		if err := netlink.LinkDel(old); err != nil {
			return nil, fmt.Errorf("remove stale %s: %w", probeDevice, err)
		}
	}
	la := netlink.NewLinkAttrs()
	la.Name = probeDevice
	// A veth, not a dummy: dummy devices are a module some kernels lack,
	// and veths are what dpd attaches to anyway.
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: probePeer}); err != nil {
		return nil, fmt.Errorf("create %s: %w", probeDevice, err)
	}
	dev, err := netlink.LinkByName(probeDevice)
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", probeDevice, err)
	}
	return dev, nil
}

func measureMapUpdate() (time.Duration, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 256})
	if err != nil {
		return 0, fmt.Errorf("create probe map: %w", err)
	}
	defer func() { _ = m.Close() }()
	const n = 200
	t := time.Now()
	for i := uint32(0); i < n; i++ {
		if err := m.Put(i%256, i); err != nil {
			return 0, fmt.Errorf("probe map update: %w", err)
		}
	}
	return time.Since(t) / n, nil
}

// measureTCX attaches and detaches on the ingress hook costRounds times.
func measureTCX(ifindex int, progs [2]*ebpf.Program) (first, next, last time.Duration, err error) {
	var firsts, nexts, lasts []time.Duration
	for i := 0; i < costRounds; i++ {
		t := time.Now()
		l1, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: progs[0], Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return 0, 0, 0, fmt.Errorf("tcx attach: %w", err)
		}
		firsts = append(firsts, time.Since(t))
		t = time.Now()
		l2, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: progs[1], Attach: ebpf.AttachTCXIngress})
		if err != nil {
			_ = l1.Close()
			return 0, 0, 0, fmt.Errorf("tcx second attach: %w", err)
		}
		nexts = append(nexts, time.Since(t))
		if err := l2.Close(); err != nil {
			_ = l1.Close()
			return 0, 0, 0, fmt.Errorf("tcx detach: %w", err)
		}
		t = time.Now()
		if err := l1.Close(); err != nil {
			return 0, 0, 0, fmt.Errorf("tcx last detach: %w", err)
		}
		lasts = append(lasts, time.Since(t))
	}
	return median(firsts), median(nexts), median(lasts), nil
}

// measureLegacy adds clsact and a filter, costRounds times; each round
// starts from a device without the qdisc, as a fresh workload veth does.
func measureLegacy(dev netlink.Link, prog *ebpf.Program) (time.Duration, error) {
	var costs []time.Duration
	for i := 0; i < costRounds; i++ {
		q := &netlink.GenericQdisc{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: dev.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
			QdiscType:  "clsact",
		}
		f := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: dev.Attrs().Index, Parent: tcParentIngress, Handle: tcHandle,
				Priority: tcPriority, Protocol: unix.ETH_P_ALL},
			Fd: prog.FD(), Name: "dpd_probe", DirectAction: true,
		}
		t := time.Now()
		if err := netlink.QdiscAdd(q); err != nil && !errors.Is(err, os.ErrExist) {
			return 0, fmt.Errorf("probe clsact: %w", err)
		}
		if err := netlink.FilterReplace(f); err != nil {
			return 0, fmt.Errorf("probe filter: %w", err)
		}
		costs = append(costs, time.Since(t))
		if err := netlink.QdiscDel(q); err != nil {
			return 0, fmt.Errorf("remove probe clsact: %w", err)
		}
	}
	return median(costs), nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
