package tcbpf

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Read-only views of the pinned state, for a restarted dpd to rebuild what
// is programmed (adoption) and to find what belongs to nothing (garbage
// collection). None of these write to the kernel.

// IfStateEntry is one dpd_ifstate value.
type IfStateEntry struct {
	Slot, Flags uint32
}

// IfStates lists dpd_ifstate by ifindex.
func (d *Datapath) IfStates() (map[int]IfStateEntry, error) {
	out := map[int]IfStateEntry{}
	var k uint32
	var v bpf.DpdDpdIfstate
	it := d.objs.DpdIfstate.Iterate()
	for it.Next(&k, &v) {
		out[int(k)] = IfStateEntry{Slot: v.Slot, Flags: v.Flags}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read ifstate: %w", err)
	}
	return out, nil
}

// PolicyEntry is a policy program installed in dpd_jump.
type PolicyEntry struct {
	Slot uint32
	Dir  int
	Prog ebpf.ProgramID
}

// Policies lists the policy programs installed in dpd_jump.
func (d *Datapath) Policies() ([]PolicyEntry, error) {
	var out []PolicyEntry
	var k, v uint32
	it := d.objs.DpdJump.Iterate()
	for it.Next(&k, &v) {
		if k < abi.JumpPolBase {
			continue
		}
		out = append(out, PolicyEntry{Slot: (k - abi.JumpPolBase) / 2, Dir: int((k - abi.JumpPolBase) % 2), Prog: ebpf.ProgramID(v)})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", abi.MapJump, err)
	}
	return out, nil
}

// ChainIndices lists the occupied dpd_chain indices.
func (d *Datapath) ChainIndices() ([]uint32, error) {
	var out []uint32
	var k, v uint32
	it := d.objs.DpdChain.Iterate()
	for it.Next(&k, &v) {
		out = append(out, k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", abi.MapChain, err)
	}
	return out, nil
}

// DeleteChainIndex empties one dpd_chain entry; absent is not an error.
func (d *Datapath) DeleteChainIndex(idx uint32) error {
	err := d.objs.DpdChain.Delete(idx)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete %s[%d]: %w", abi.MapChain, idx, err)
	}
	return nil
}

// CounterIDs lists the rule counter ids in dpd_rule_ctrs.
func (d *Datapath) CounterIDs() ([]uint64, error) {
	var out []uint64
	var k uint64
	it := d.objs.DpdRuleCtrs.Iterate()
	var v []bpf.DpdDpdCounter
	for it.Next(&k, &v) {
		out = append(out, k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", abi.MapRuleCtrs, err)
	}
	return out, nil
}

// AttachedCurrent reports, without changing anything, whether both hooks
// of the interface run this Datapath's entry programs the way Attach
// would leave them (TCX links pinned, or legacy filters) with nothing of
// the other mode left. When it says yes, Attach would write nothing.
func (d *Datapath) AttachedCurrent(ifindex int, ifname string) (AttachMode, bool) {
	return d.attachedCurrent(ifindex, ifname, false)
}

// AttachedCurrentHost is AttachedCurrent for the host endpoint entry
// programs (AttachHost).
func (d *Datapath) AttachedCurrentHost(ifindex int, ifname string) (AttachMode, bool) {
	return d.attachedCurrent(ifindex, ifname, true)
}

func (d *Datapath) attachedCurrent(ifindex int, ifname string, host bool) (AttachMode, bool) {
	tcx, tcxOK := d.tcxCurrent(ifindex, ifname, host)
	tc, tcOK := d.tcCurrent(ifindex, host)
	switch {
	case !d.opts.ForceLegacyTC && tcx == len(d.hooks()) && tcxOK && tc == 0 && tcOK:
		return AttachTCX, true
	case d.opts.ForceLegacyTC && tc == len(d.hooks()) && tcOK && tcx == 0 && tcxOK:
		return AttachTC, true
	}
	return "", false
}

// tcxCurrent counts the hooks with exactly one dpd TCX link, current and
// pinned; ok is false when a hook has some other dpd link (stale or
// duplicate) or cannot be read.
func (d *Datapath) tcxCurrent(ifindex int, ifname string, host bool) (n int, ok bool) {
	for _, h := range d.hooks() {
		links, progs, err := d.ourTCXLinks(ifindex, h)
		if errors.Is(err, ebpf.ErrNotSupported) {
			return 0, true // no TCX: nothing of it can be left
		}
		if err != nil {
			return 0, false
		}
		switch {
		case len(links) == 0:
		case len(links) == 1:
			prog := d.entryFor(h, host)
			if !d.isCurrent(progs[0], prog) || !pinnedIs(d.linkPin(ifname, h), links[0]) {
				return n, false
			}
			n++
		default:
			return n, false
		}
	}
	return n, true
}

// tcCurrent counts the hooks with a current dpd filter; ok is false when a
// hook has a stale dpd filter or cannot be read. The dumps need the index
// only (see readAttached); a device gone meanwhile has no filters, and
// tcxCurrent fails on it.
func (d *Datapath) tcCurrent(ifindex int, host bool) (n int, ok bool) {
	l := indexLink(ifindex)
	for _, h := range d.hooks() {
		filters, err := listFilters(d.nl, l, h.parent)
		if err != nil {
			return n, false
		}
		prog := d.entryFor(h, host)
		for _, f := range filters {
			bf, ours := isOurFilter(f)
			if !ours {
				continue
			}
			if !d.isCurrent(ebpf.ProgramID(bf.Id), prog) {
				return n, false
			}
			n++
		}
	}
	return n, true
}

// attachedPrograms lists every program on the interface's TCX hooks and
// legacy clsact filters. An interface that is gone has none; any other
// failure to read is an error, never "none": callers decide from this
// whether something is theirs to detach or release.
func (d *Datapath) attachedPrograms(ifindex int) ([]ebpf.ProgramID, error) {
	return readAttached(link.QueryPrograms, d.nl, ifindex)
}

// readAttached is attachedPrograms over its two sources, so that the
// handling of each answer is testable without a kernel.
func readAttached(queryTCX func(link.QueryOptions) (*link.QueryResult, error), nl filterLister, ifindex int) ([]ebpf.ProgramID, error) {
	var out []ebpf.ProgramID
	for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
		res, err := queryTCX(link.QueryOptions{Target: ifindex, Attach: at})
		switch {
		case err == nil:
		case isGone(err):
			return nil, nil
		case tcxMissing(err):
			continue // a kernel before TCX: nothing can be attached there
		default:
			return nil, fmt.Errorf("query tcx programs of %d: %w", ifindex, err)
		}
		for _, p := range res.Programs {
			out = append(out, p.ID)
		}
	}
	// The filter dumps need the index only (a device gone by now answers
	// with none). A link lookup first parsed every attribute of the link
	// (~8 KiB of garbage) for each interface a start fails closed, beside
	// the cold start's snapshot, where the heap peaks.
	l := indexLink(ifindex)
	for _, parent := range []uint32{tcParentIngress, tcParentEgress} {
		filters, err := listFilters(nl, l, parent)
		if err != nil {
			return nil, err
		}
		for _, f := range filters {
			if bf, ok := f.(*netlink.BpfFilter); ok && bf.Id > 0 {
				out = append(out, ebpf.ProgramID(bf.Id))
			}
		}
	}
	return out, nil
}

// OwnsAttachment reports whether a dpd entry program of this Datapath (or
// of its predecessor on the same pins) is attached to the interface: an
// entry program that uses this Datapath's dpd_ifstate or dpd_jump (or a
// retired dpd_jump). Entry programs of another dpd with other pins are not
// ours. When the answer cannot be known the error says why; callers must
// then neither detach nor remove anything of the interface.
func (d *Datapath) OwnsAttachment(ifindex int) (bool, error) {
	ours, _, err := d.EntryOwners(ifindex)
	return ours, err
}

// EntryOwners reports whether dpd entry programs on the interface are
// ours (see OwnsAttachment) and whether some belong to another dpd.
func (d *Datapath) EntryOwners(ifindex int) (ours, foreign bool, err error) {
	attached, err := d.attachedPrograms(ifindex)
	if err != nil {
		return false, false, err
	}
	if len(attached) == 0 {
		return false, false, nil // the common case: a new interface
	}
	mine := maps.Clone(d.ownMapIDs)
	retired, err := d.retiredIDs()
	if err != nil {
		return false, false, err
	}
	for _, r := range retired {
		mine[r] = true
	}
	for _, pid := range attached {
		id, err := attachedIdentity(pid)
		if errors.Is(err, os.ErrNotExist) {
			continue // detached meanwhile
		}
		if err != nil {
			return false, false, err
		}
		if !isEntryName(id.name) {
			continue
		}
		if slices.ContainsFunc(id.mapIDs, func(m ebpf.MapID) bool { return mine[m] }) {
			ours = true
		} else {
			foreign = true
		}
	}
	return ours, foreign, nil
}

// retiredIDs are the map ids of the retired program arrays.
func (d *Datapath) retiredIDs() ([]ebpf.MapID, error) {
	ents, err := os.ReadDir(d.retiredPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list retired maps: %w", err)
	}
	var out []ebpf.MapID
	for _, e := range ents {
		m, err := ebpf.LoadPinnedMap(d.retiredPath()+"/"+e.Name(), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("open retired map %s: %w", e.Name(), err)
		}
		info, err := m.Info()
		_ = m.Close()
		if err != nil {
			return nil, fmt.Errorf("retired map %s: %w", e.Name(), err)
		}
		if id, ok := info.ID(); ok {
			out = append(out, id)
		}
	}
	return out, nil
}

// RemoveLinkPins removes the TCX link pins of ifname. For an interface that
// no longer exists this is all that is left of its attachment.
func (d *Datapath) RemoveLinkPins(ifname string) error {
	var errs []error
	for _, h := range d.hooks() {
		if err := os.Remove(d.linkPin(ifname, h)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unpin %s: %w", d.linkPin(ifname, h), err))
		}
	}
	return errors.Join(errs...)
}
