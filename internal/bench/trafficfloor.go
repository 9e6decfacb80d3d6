package bench

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The floor path is the plain one with a program that passes everything on
// each of the four hooks dpd's programs use (both host sides, ingress and
// egress), attached the way dpd attaches (clsact + cls_bpf in tc mode, TCX
// links in tcx mode): what any TC dataplane pays before its programs do
// anything, so that P7's dpd figures can be read against it.

// passProgram is `return TC_ACT_OK`.
func passProgram() (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "p7_pass", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return nil, fmt.Errorf("load pass program: %w", err)
	}
	return p, nil
}

// attachPass puts prog on both hooks of the node's interface ifname, as
// TCX links when tcx (returned, for the caller to close) or as clsact
// filters (which go with the interface).
func (n *node) attachPass(ifname string, prog *ebpf.Program, tcx bool) ([]link.Link, error) {
	l, err := n.nl.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", ifname, err)
	}
	if tcx {
		// The interface index means something in the node's namespace
		// only.
		var out []link.Link
		err := n.do(func() error {
			for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				tl, err := link.AttachTCX(link.TCXOptions{Interface: l.Attrs().Index, Program: prog, Attach: at})
				if err != nil {
					return fmt.Errorf("tcx on %s: %w", ifname, err)
				}
				out = append(out, tl)
			}
			return nil
		})
		return out, err
	}
	return nil, n.attachPassTC(l, ifname, prog)
}

func (n *node) attachPassTC(l netlink.Link, ifname string, prog *ebpf.Program) error {
	q := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
		Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
	if err := n.nl.QdiscAdd(q); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("clsact on %s: %w", ifname, err)
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		f := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index, Parent: parent,
				Handle: netlink.MakeHandle(0, 1), Protocol: unix.ETH_P_ALL, Priority: 1},
			Fd: prog.FD(), Name: "p7_pass", DirectAction: true,
		}
		if err := n.nl.FilterAdd(f); err != nil {
			return fmt.Errorf("filter on %s: %w", ifname, err)
		}
	}
	return nil
}
