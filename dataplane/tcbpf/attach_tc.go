package tcbpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Legacy TC: a clsact qdisc with one direct-action cls_bpf filter per
// direction. dpd's filters are recognised by priority and handle; priority 1
// runs them before anything else on the hook.
const (
	tcParentIngress = netlink.HANDLE_MIN_INGRESS
	tcParentEgress  = netlink.HANDLE_MIN_EGRESS
	tcPriority      = 1
	tcHandle        = 0xd9d
)

func isOurFilter(f netlink.Filter) (*netlink.BpfFilter, bool) {
	bf, ok := f.(*netlink.BpfFilter)
	if !ok {
		return nil, false
	}
	a := bf.Attrs()
	return bf, a.Priority == tcPriority && a.Handle == tcHandle
}

// ensureClsact adds the clsact qdisc; created says it was not there
// before, so no filter can be on it yet.
func (d *Datapath) ensureClsact(ifindex int) (created bool, err error) {
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: ifindex,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		},
		QdiscType: "clsact",
	}
	err = d.nl.QdiscAdd(q)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("add clsact: %w", err)
	}
	return true, nil
}

// attachTC puts the entry programs on ifindex's clsact hooks. On a qdisc
// it just created (a fresh workload interface) there is nothing to look
// at first: three netlink round trips of six, about 40 % of the attach.
// A vanished interface fails with ENODEV from the qdisc request.
func (d *Datapath) attachTC(ifindex int, host bool) error {
	created, err := d.ensureClsact(ifindex)
	if err != nil {
		return err
	}
	for _, h := range d.hooks() {
		prog := d.entryFor(h, host)
		if err := d.attachTCHook(ifindex, h, prog, !created); err != nil {
			return err
		}
	}
	return nil
}

// attachTCHook installs prog on hook h; look says the hook may already
// carry a filter of dpd's, which is kept when its program is current.
func (d *Datapath) attachTCHook(ifindex int, h hook, prog *ebpf.Program, look bool) error {
	if look {
		filters, err := d.nl.FilterList(indexLink(ifindex), h.parent)
		if err != nil {
			return fmt.Errorf("list tc %s filters: %w", h.suffix, err)
		}
		for _, f := range filters {
			if bf, ok := isOurFilter(f); ok && d.isCurrent(ebpf.ProgramID(bf.Id), prog) {
				return nil
			}
		}
	}
	info := d.want[prog]
	// Replace swaps the program of an existing filter with the same
	// priority and handle atomically, or creates it.
	f := &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: ifindex,
			Parent:    h.parent,
			Handle:    tcHandle,
			Priority:  tcPriority,
			Protocol:  unix.ETH_P_ALL,
		},
		Fd:           prog.FD(),
		Name:         info.name,
		DirectAction: true,
	}
	if err := d.nl.FilterReplace(f); err != nil {
		return fmt.Errorf("tc %s filter: %w", h.suffix, err)
	}
	return nil
}

// detachTC removes dpd's filters, then the clsact qdisc if no filter is
// left on it. A missing interface has nothing left to remove.
func (d *Datapath) detachTC(ifindex int) error {
	// The lists read only the index; a gone device answers as one
	// without filters.
	l := indexLink(ifindex)
	remaining, removed := 0, 0
	for _, h := range d.hooks() {
		filters, err := listFilters(d.nl, l, h.parent)
		if err != nil {
			return err
		}
		for _, f := range filters {
			if _, ok := isOurFilter(f); !ok {
				remaining++
				continue
			}
			if err := d.nl.FilterDel(f); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("delete tc %s filter: %w", h.suffix, err)
			}
			removed++
		}
	}
	// Only a qdisc dpd emptied is removed; the qdisc dump this needs walks
	// every device on the node, so it is kept off the common path.
	if remaining > 0 || removed == 0 {
		return nil
	}
	if has, err := hasClsact(d.nl, l); err != nil || !has {
		return err
	}
	q := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := d.nl.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("delete clsact: %w", err)
	}
	return nil
}

// filterLister is the part of a netlink handle listFilters and hasClsact
// read through.
type filterLister interface {
	FilterList(link netlink.Link, parent uint32) ([]netlink.Filter, error)
	QdiscList(link netlink.Link) ([]netlink.Qdisc, error)
}

// listFilters lists one hook's filters of one device (a per-device dump,
// unlike RTM_GETQDISC). A device without a clsact qdisc answers with no
// filters, and so does one that is gone; every other failure is an error,
// never "no filters", since callers detach or adopt from the answer.
func listFilters(h filterLister, l netlink.Link, parent uint32) ([]netlink.Filter, error) {
	fs, err := h.FilterList(l, parent)
	if isGone(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list tc filters of link %d: %w", l.Attrs().Index, err)
	}
	return fs, nil
}

// hasClsact dumps the qdiscs, which walks every device on the node: call it
// only off the per-endpoint path.
func hasClsact(h filterLister, l netlink.Link) (bool, error) {
	qs, err := h.QdiscList(l)
	if isGone(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("list qdiscs of link %d: %w", l.Attrs().Index, err)
	}
	for _, q := range qs {
		if q.Type() == "clsact" {
			return true, nil
		}
	}
	return false, nil
}

// indexLink is a link by index alone, for the tc requests that read
// nothing else of it (filter and qdisc lists): no lookup first.
func indexLink(ifindex int) netlink.Link {
	return &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: ifindex}}
}

// isGone reports whether err says the device (or the object asked about)
// does not exist: the only answers that may be read as "nothing there".
func isGone(err error) bool {
	if err == nil {
		return false
	}
	var nf netlink.LinkNotFoundError
	return errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT) || errors.As(err, &nf)
}
