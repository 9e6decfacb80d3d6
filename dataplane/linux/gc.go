package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
)

// DefaultGCInterval is how often garbage collection runs after the first.
const DefaultGCInterval = 60 * time.Second

// Garbage collection removes what belongs to no live interface: the state
// an earlier dpd left for endpoints the controller no longer sends, and
// the debris of a crash mid-apply. Live means an endpoint state: one the
// engine applied (even if that failed), or a workload interface failed
// closed. It runs once the first apply after InSync has ended (before,
// the controller has not said what it wants, and everything adopted must
// keep working) and then every GCInterval. It only touches what is dpd's
// by construction: pins under its pin dir, entries of its maps, and
// interfaces that carry its entry programs.

// GCReport counts what one collection removed.
type GCReport struct {
	Endpoints, LinkPins, Attachments, IfStates, JumpSlots, ChainSlots int
	Programs, ProgramPins, Routes, IPSets, Counters, RetiredMaps      int
}

// Total is the number of objects removed.
func (r GCReport) Total() int {
	return r.Endpoints + r.LinkPins + r.Attachments + r.IfStates + r.JumpSlots + r.ChainSlots +
		r.Programs + r.ProgramPins + r.Routes + r.IPSets + r.Counters + r.RetiredMaps
}

// afterFirstApplyLocked ends the restart: what the first apply did not
// claim is collected, and the cost of the reconciliation is logged.
func (k *Kernel) afterFirstApplyLocked() error {
	o := k.ops
	o.Netlink = k.cfg.Stats()
	o = o.Sub(k.opsBase) // the apply itself, not fail-closed work before it
	r, err := k.collectLocked()
	k.log.Info("first apply after InSync done",
		"since_start", time.Since(k.started).Round(time.Millisecond),
		"adopted_endpoints", k.adopted.endpoints, "adopted_programs", k.adopted.programs,
		"program_loads", o.ProgramLoads, "program_adopts", o.ProgramAdopts,
		"jump_writes", o.JumpWrites, "ifstate_writes", o.IfStateWrites,
		"attaches", o.Attaches, "netlink_writes", o.Netlink.Writes(),
		"fail_closed_before", k.opsBase.FailClosed, "garbage_collected", r.Total())
	return err
}

func (k *Kernel) gcLoop(ctx context.Context) {
	t := time.NewTicker(k.gcInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := k.CollectGarbage(); err != nil {
			k.log.Warn("garbage collection", "err", err)
		}
	}
}

// CollectGarbage runs a collection now, unless the first apply after
// InSync has not ended yet (then it does nothing).
func (k *Kernel) CollectGarbage() (GCReport, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.applied {
		return GCReport{}, nil
	}
	return k.collectLocked()
}

func (k *Kernel) collectLocked() (GCReport, error) {
	var r GCReport
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	note(k.gcEndpointsLocked(&r))
	note(k.gcAttachmentsLocked(&r))
	note(k.gcMapsLocked(&r))
	k.releasePreloadsBeforeLocked(time.Now().Add(-k.gcInterval))
	note(k.gcProgramsLocked(&r))
	if n, err := k.bpf.RetainIPSets(k.knownSetsLocked()); err != nil {
		note(err)
	} else {
		r.IPSets = n
	}
	var live []int
	for _, st := range k.eps {
		if st.ifindex != 0 {
			live = append(live, st.ifindex)
		}
	}
	before := k.retiredKept
	kept, err := k.bpf.ReleaseRetired(live)
	note(err)
	if before > kept {
		r.RetiredMaps = before - kept
	}
	k.retiredKept = kept
	k.ops.GCRemovals += uint64(r.Total())
	if r.Total() > 0 {
		k.log.Info("garbage collected", "report", fmt.Sprintf("%+v", r))
	}
	return r, errors.Join(errs...)
}

// gcEndpointsLocked settles the interfaces adopted at start that the first
// apply did not claim: one that still exists unprogrammed stays fail
// closed; an endpoint the controller no longer sends is removed like
// RemoveEndpoint removes it; one whose interface is gone leaves nothing.
func (k *Kernel) gcEndpointsLocked(r *GCReport) error {
	var errs []error
	for name, st := range k.eps {
		if st.ep != nil {
			continue
		}
		ifindex, exists := k.mon.Ifindex(name)
		if exists && ifindex == st.ifindex && st.closed && k.mon.Matches(name) {
			st.adopted = false
			continue
		}
		nets, err := k.routedNetsLocked(ifindex, exists)
		if err != nil {
			errs = append(errs, fmt.Errorf("unclaimed %s: %w", name, err))
			continue
		}
		if err := k.dropStateLocked(name, st, nets); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(k.eps, name)
		r.Endpoints++
	}
	return errors.Join(errs...)
}

// routedNetsLocked lists the destinations of dpd's routes through an
// interface: an adopted endpoint's addresses, whose neighbours go too.
func (k *Kernel) routedNetsLocked(ifindex int, exists bool) ([]netip.Prefix, error) {
	if !exists {
		return nil, nil
	}
	routes, err := k.cfg.ListDpdRoutes()
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var out []netip.Prefix
	for _, rt := range routes {
		if rt.LinkIndex != ifindex || rt.Dst == nil {
			continue
		}
		if a, ok := netip.AddrFromSlice(rt.Dst.IP); ok {
			ones, _ := rt.Dst.Mask.Size()
			out = append(out, netip.PrefixFrom(a.Unmap(), ones))
		}
	}
	return out, nil
}

// gcAttachmentsLocked detaches dpd's entry programs from interfaces that
// have no state: link pins of vanished or forgotten interfaces, and legacy
// filters or links a crash left unrecorded.
func (k *Kernel) gcAttachmentsLocked(r *GCReport) error {
	var errs []error
	names, err := k.bpf.PinnedLinks()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, name := range names {
		if _, live := k.eps[name]; live {
			continue
		}
		if ifindex, ok := k.mon.Ifindex(name); ok {
			owned, err := k.bpf.OwnsAttachment(ifindex)
			if err != nil {
				// Unknown: its pins may hold its only links; keep them.
				errs = append(errs, fmt.Errorf("orphan %s: %w", name, err))
				continue
			}
			if owned {
				if err := k.detachOrphanLocked(name, ifindex); err != nil {
					errs = append(errs, err)
					continue
				}
				r.Attachments++
			}
		}
		if err := k.bpf.RemoveLinkPins(name); err != nil {
			errs = append(errs, err)
			continue
		}
		r.LinkPins++
	}
	links, err := netlink.LinkList()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list links: %w", err))...)
	}
	for _, l := range links {
		name, ifindex := l.Attrs().Name, l.Attrs().Index
		if _, live := k.eps[name]; live || !k.mon.Matches(name) {
			continue
		}
		owned, err := k.bpf.OwnsAttachment(ifindex)
		if err != nil {
			errs = append(errs, fmt.Errorf("orphan %s: %w", name, err))
			continue
		}
		if !owned {
			continue
		}
		if err := k.detachOrphanLocked(name, ifindex); err != nil {
			errs = append(errs, err)
			continue
		}
		r.Attachments++
	}
	return errors.Join(errs...)
}

// detachOrphanLocked removes dpd's programs and routes from an interface
// with no state.
func (k *Kernel) detachOrphanLocked(name string, ifindex int) error {
	nets, err := k.routedNetsLocked(ifindex, true)
	if err != nil {
		return fmt.Errorf("orphan %s: %w", name, err)
	}
	if err := k.bpf.Detach(ifindex, name); err != nil {
		return fmt.Errorf("detach orphan %s: %w", name, err)
	}
	k.ops.Detaches++
	if err := k.cfg.UnconfigureEndpoint(name, nets); err != nil {
		return fmt.Errorf("unconfigure orphan %s: %w", name, err)
	}
	return nil
}

// gcMapsLocked deletes dpd_ifstate entries of no live interface, dpd_jump
// policies of unallocated slots, and dpd_chain entries no program owns.
func (k *Kernel) gcMapsLocked(r *GCReport) error {
	var errs []error
	live := map[int]bool{}
	for _, st := range k.eps {
		if st.ifindex != 0 {
			live[st.ifindex] = true
		}
	}
	states, err := k.bpf.IfStates()
	if err != nil {
		errs = append(errs, err)
	}
	for ifindex := range states {
		if live[ifindex] {
			continue
		}
		if err := k.bpf.DeleteIfState(ifindex); err != nil {
			errs = append(errs, err)
			continue
		}
		k.ops.IfStateWrites++
		r.IfStates++
	}
	pols, err := k.bpf.Policies()
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range pols {
		if k.slots.inUse(p.Slot) {
			continue
		}
		if err := k.bpf.ClearPolicy(p.Slot, p.Dir); err != nil {
			errs = append(errs, err)
			continue
		}
		k.ops.JumpWrites++
		r.JumpSlots++
	}
	chain := k.bpf.Maps().Chain
	idx, err := k.bpf.ChainIndices()
	if err != nil {
		errs = append(errs, err)
	}
	for _, i := range idx {
		if polprog.ChainIndexInUse(chain, i) {
			continue
		}
		if err := k.bpf.DeleteChainIndex(i); err != nil {
			errs = append(errs, err)
			continue
		}
		r.ChainSlots++
	}
	return errors.Join(errs...)
}

// gcProgramsLocked releases adopted programs nobody claimed, removes pin
// directories no program owns, and deletes the counters of rules no
// loaded program has.
func (k *Kernel) gcProgramsLocked(r *GCReport) error {
	var errs []error
	for key, sp := range k.pinned {
		if sp.refs > 0 {
			continue // still installed in a slot the first apply kept
		}
		delete(k.pinned, key)
		if err := sp.pinned.Release(true); err != nil {
			errs = append(errs, err)
		}
		r.Programs++
	}
	owned := map[string]bool{}
	for _, sp := range k.progs {
		owned[sp.prog.PinDir()] = true
	}
	for _, sp := range k.pinned {
		owned[sp.pinned.Dir] = true
	}
	dir := k.progsDirLocked()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if owned[p] {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove stale program pins %s: %w", p, err))
			continue
		}
		r.ProgramPins++
	}
	keep := map[uint64]bool{}
	for _, sp := range k.progs {
		for _, ri := range sp.prog.Rules() {
			keep[ri.CounterID] = true
		}
	}
	ids, err := k.bpf.CounterIDs()
	if err != nil {
		errs = append(errs, err)
	}
	var drop []uint64
	for _, id := range ids {
		if !keep[id] {
			drop = append(drop, id)
		}
	}
	if err := k.bpf.DeleteCounters(drop); err != nil {
		errs = append(errs, err)
	} else {
		r.Counters = len(drop)
	}
	return errors.Join(errs...)
}
