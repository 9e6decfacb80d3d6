package linux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"
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

// collector runs garbage collection over the endpoint and policy
// programmers (which know what is live and remove what is theirs) and
// the IP sets and retired maps. Called under Kernel.mu.
type collector struct {
	eps      *endpointProgrammer
	pols     *policyProgrammer
	sweep    sweepFacility
	log      *slog.Logger
	ops      *Ops
	interval time.Duration

	knownSets   map[string]bool // IP sets the engine replaced and did not remove
	retiredKept int             // retired program arrays still in use at the last collection
}

// afterFirstApplyLocked ends the restart: what the first apply did not
// claim is collected, and the cost of the reconciliation is logged.
func (k *Kernel) afterFirstApplyLocked() error {
	o := k.ops
	o.Netlink = k.netStats()
	o = o.Sub(k.opsBase) // the apply itself, not fail-closed work before it
	r, err := k.gc.collect()
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
	return k.gc.collect()
}

// collect runs one collection.
func (c *collector) collect() (GCReport, error) {
	var r GCReport
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	note(c.eps.sweepUnclaimed(&r))
	note(c.eps.sweepToHost(&r))
	note(c.eps.sweepAttachments(&r))
	note(c.eps.sweepMaps(&r))
	c.pols.releasePreloadsBefore(time.Now().Add(-c.interval))
	note(c.pols.sweep(&r))
	keep := make([]string, 0, len(c.knownSets))
	for id := range c.knownSets {
		keep = append(keep, id)
	}
	if n, err := c.sweep.RetainIPSets(keep); err != nil {
		note(err)
	} else {
		r.IPSets = n
	}
	before := c.retiredKept
	kept, err := c.sweep.ReleaseRetired(c.eps.liveIfindexes())
	note(err)
	if before > kept {
		r.RetiredMaps = before - kept
	}
	c.retiredKept = kept
	c.ops.GCRemovals += uint64(r.Total())
	if r.Total() > 0 {
		c.log.Info("garbage collected", "report", fmt.Sprintf("%+v", r))
	}
	return r, errors.Join(errs...)
}

// liveIfindexes are the interfaces some endpoint state holds.
func (e *endpointProgrammer) liveIfindexes() []int {
	var live []int
	for _, st := range e.eps {
		if st.ifindex != 0 {
			live = append(live, st.ifindex)
		}
	}
	return live
}

// sweepUnclaimed settles the interfaces adopted at start that the first
// apply did not claim: one that still exists unprogrammed stays fail
// closed; an endpoint the controller no longer sends is removed like
// RemoveEndpoint removes it (its interface stays failed closed, nothing is
// detached); one whose interface is gone leaves nothing. An interface that
// no longer matches InterfacePrefix is no workload interface any more:
// dpd's programs come off it.
func (e *endpointProgrammer) sweepUnclaimed(r *GCReport) error {
	var errs []error
	for name, st := range e.eps {
		if st.ep != nil {
			continue
		}
		if st.host {
			// No host endpoint binds it any more: unpoliced, detached.
			if err := e.dropHost(name, st); err != nil {
				errs = append(errs, err)
				continue
			}
			delete(e.eps, name)
			r.Endpoints++
			continue
		}
		ifindex, exists := e.links.Ifindex(name)
		workload := e.links.Matches(name)
		if exists && ifindex == st.ifindex && st.closed && workload {
			st.adopted = false
			continue
		}
		nets, err := e.routedNets(ifindex, exists)
		if err != nil {
			errs = append(errs, fmt.Errorf("unclaimed %s: %w", name, err))
			continue
		}
		if exists && ifindex == st.ifindex && workload {
			if err := e.closeRemoved(name, st, nets); err != nil {
				errs = append(errs, err)
				continue
			}
			r.Endpoints++
			continue
		}
		if err := e.dropState(name, st, nets, exists && !workload); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(e.eps, name)
		r.Endpoints++
		if exists && workload {
			e.queue.put(name, ifindex) // re-created since: fail it closed
		}
	}
	return errors.Join(errs...)
}

// routedNets lists the destinations of dpd's routes through an
// interface: an adopted endpoint's addresses, whose neighbours go too.
func (e *endpointProgrammer) routedNets(ifindex int, exists bool) ([]netip.Prefix, error) {
	if !exists {
		return nil, nil
	}
	routes, err := e.net.ListDpdRoutes()
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var out []netip.Prefix
	for _, rt := range routes {
		if rt.LinkIndex != ifindex || rt.Dst == nil || rt.Gw != nil {
			// Routes via a gateway are to other nodes (remote.go), not
			// an endpoint's own.
			continue
		}
		if a, ok := netip.AddrFromSlice(rt.Dst.IP); ok {
			ones, _ := rt.Dst.Mask.Size()
			out = append(out, netip.PrefixFrom(a.Unmap(), ones))
		}
	}
	return out, nil
}

// sweepAttachments settles dpd's entry programs on interfaces that have
// no state (link pins of vanished or forgotten interfaces, legacy filters
// or links a crash left unrecorded): a workload interface is failed closed
// (it is not detached: it would pass traffic unpoliced), the pins of a
// vanished one are removed, and one that is no workload interface any
// more is detached.
func (e *endpointProgrammer) sweepAttachments(r *GCReport) error {
	var errs []error
	names, err := e.entry.PinnedLinks()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, name := range names {
		if _, live := e.eps[name]; live {
			continue
		}
		if ifindex, ok := e.links.Ifindex(name); ok {
			if e.links.Matches(name) {
				e.failCloseNow(name, ifindex)
				continue // its pins hold its links
			}
			owned, err := e.entry.OwnsAttachment(ifindex)
			if err != nil {
				// Unknown: its pins may hold its only links; keep them.
				errs = append(errs, fmt.Errorf("orphan %s: %w", name, err))
				continue
			}
			if owned {
				if err := e.detachOrphan(name, ifindex); err != nil {
					errs = append(errs, err)
					continue
				}
				r.Attachments++
			}
		}
		if err := e.entry.RemoveLinkPins(name); err != nil {
			errs = append(errs, err)
			continue
		}
		r.LinkPins++
	}
	links, err := e.links.Links()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, l := range links {
		name, ifindex := l.Name, l.Ifindex
		if _, live := e.eps[name]; live || !e.links.Matches(name) {
			continue
		}
		owned, err := e.entry.OwnsAttachment(ifindex)
		if err != nil {
			errs = append(errs, fmt.Errorf("orphan %s: %w", name, err))
			continue
		}
		if owned {
			e.failCloseNow(name, ifindex)
		}
	}
	return errors.Join(errs...)
}

// detachOrphan removes dpd's programs and routes from an interface
// with no state that is no workload interface.
func (e *endpointProgrammer) detachOrphan(name string, ifindex int) error {
	nets, err := e.routedNets(ifindex, true)
	if err != nil {
		return fmt.Errorf("orphan %s: %w", name, err)
	}
	if err := e.entry.Detach(ifindex, name); err != nil {
		return fmt.Errorf("detach orphan %s: %w", name, err)
	}
	e.ops.Detaches++
	if err := e.net.UnconfigureEndpoint(name, nets); err != nil {
		return fmt.Errorf("unconfigure orphan %s: %w", name, err)
	}
	return nil
}

// sweepMaps deletes dpd_ifstate entries of no live interface and dpd_jump
// policies of unallocated slots.
func (e *endpointProgrammer) sweepMaps(r *GCReport) error {
	var errs []error
	live := map[int]bool{}
	for _, st := range e.eps {
		if st.ifindex != 0 {
			live[st.ifindex] = true
		}
	}
	states, err := e.entry.IfStates()
	if err != nil {
		errs = append(errs, err)
	}
	for ifindex := range states {
		if live[ifindex] {
			continue
		}
		if err := e.entry.DeleteIfState(ifindex); err != nil {
			errs = append(errs, err)
			continue
		}
		e.ops.IfStateWrites++
		r.IfStates++
	}
	if err := e.sweepHostStages(live, r); err != nil {
		errs = append(errs, err)
	}
	pols, err := e.entry.Policies()
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range pols {
		if e.slots.inUse(p.Slot) {
			continue
		}
		if err := e.entry.ClearPolicy(p.Slot, p.Dir); err != nil {
			errs = append(errs, err)
			continue
		}
		e.ops.JumpWrites++
		r.JumpSlots++
	}
	return errors.Join(errs...)
}

// sweep releases adopted programs nobody claimed, removes pin directories
// no program owns, deletes the counters of rules no loaded program has,
// and the dpd_chain entries no program owns.
func (p *policyProgrammer) sweep(r *GCReport) error {
	var errs []error
	idx, err := p.fac.ChainIndices()
	if err != nil {
		errs = append(errs, err)
	}
	for _, i := range idx {
		if p.fac.ChainIndexInUse(i) {
			continue
		}
		if err := p.fac.DeleteChainIndex(i); err != nil {
			errs = append(errs, err)
			continue
		}
		r.ChainSlots++
	}
	for key, sp := range p.pinned {
		if sp.refs > 0 {
			continue // still installed in a slot the first apply kept
		}
		delete(p.pinned, key)
		if err := sp.pinned.Release(true); err != nil {
			errs = append(errs, err)
		}
		r.Programs++
	}
	owned := map[string]bool{}
	for _, sp := range p.progs {
		owned[sp.prog.PinDir()] = true
	}
	for _, sp := range p.pinned {
		owned[sp.pinned.Dir()] = true
	}
	dir := p.fac.ProgsDir()
	names, err := p.fac.PinnedNames()
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		if owned[path] {
			continue
		}
		if err := p.fac.RemovePinDir(path); err != nil {
			errs = append(errs, fmt.Errorf("remove stale program pins %s: %w", path, err))
			continue
		}
		r.ProgramPins++
	}
	keep := map[uint64]bool{}
	for _, sp := range p.progs {
		for _, ri := range sp.prog.Rules() {
			keep[ri.CounterID] = true
		}
	}
	if p.keepCounters != nil {
		for _, id := range p.keepCounters() {
			keep[id] = true
		}
	}
	ids, err := p.fac.CounterIDs()
	if err != nil {
		errs = append(errs, err)
	}
	var drop []uint64
	for _, id := range ids {
		if !keep[id] {
			drop = append(drop, id)
		}
	}
	if err := p.fac.DeleteCounters(drop); err != nil {
		errs = append(errs, err)
	} else {
		r.Counters = len(drop)
	}
	return errors.Join(errs...)
}
