package linux

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// endpointProgrammer programs workload interfaces: entry programs
// attached, dpd_ifstate, the policy slots of dpd_jump (with programs from
// the policy programmer), and the routes and neighbours of each endpoint.
// It keeps what it verified per interface so that an unchanged endpoint
// costs no kernel operation, and fails closed the interfaces nothing has
// programmed (failclosed.go). Called under Kernel.mu; attaches run without
// it (attachq.go).
type endpointProgrammer struct {
	entry entryFacility // jumps, as the programmers write through it
	jumps *jumpSlots
	net   endpointNet
	links linkFacility
	pols  *policyProgrammer
	log   *slog.Logger
	ops   *Ops
	host  hostFacility // nil: host endpoints are not supported
	// toHost is DefaultEndpointToHostAction and its Return policy.
	toHost toHostState
	queue  *attachQueue // the interfaces waiting for the attach worker
	// afterAttach is Options.AfterAttach.
	afterAttach func(iface string)
	// releasePreview, when staged previews are on, clears an interface's
	// previews before its slot is freed (preview.go).
	releasePreview func(iface string)

	eps   map[string]*endpointState // by interface name
	slots slotAllocator
	// groups are the shared slots of the policy groups (slotgroups.go).
	groups map[string]*slotGroup
	// applied: the first apply after InSync has ended, so an interface
	// that appears now is fresh.
	applied bool
}

func newEndpointProgrammer(entry entryFacility, net endpointNet, links linkFacility, pols *policyProgrammer,
	slots uint32, queue *attachQueue, log *slog.Logger, ops *Ops) *endpointProgrammer {
	j := newJumpSlots(entry)
	return &endpointProgrammer{entry: j, jumps: j, net: net, links: links, pols: pols, queue: queue, log: log, ops: ops,
		eps: map[string]*endpointState{}, slots: newSlotAllocator(slots), groups: map[string]*slotGroup{}}
}

// endpointState is what the kernel has programmed for one interface.
type endpointState struct {
	// ep is the endpoint the engine applied; nil for an interface the
	// engine has not claimed: adopted after a restart (until the first
	// apply decides), or failed closed while no endpoint names it.
	ep        *model.Endpoint
	ifindex   int // 0 while the interface is absent
	slot      uint32
	hasSlot   bool
	grp       *slotGroup // the policy group whose slot this is; nil: its own
	mode      tcbpf.AttachMode
	inst      [2]*sharedProg // installed program per direction; nil: none known
	ready     bool           // ifstate says READY
	ifsSlot   uint32         // the slot the ifstate entry names
	closed    bool           // ifstate without READY: the interface drops everything
	adopted   bool           // found in the pinned state at start, not yet claimed
	lastApply time.Time

	// What this process knows without asking the kernel again, until the
	// next resync or link event on the interface (Resync, onLink):
	// attachOK: the entry programs are attached at ifindex (this process
	// attached them or saw them attached); verified: the last ApplyEndpoint
	// programmed everything for ep at ifindex.
	attachOK bool
	verified bool
	// fresh: the interface appeared while this process was running after
	// its first apply, so nothing of an earlier dpd is on it and its first
	// configuration writes without reading. configured: that happened.
	fresh      bool
	configured bool
	// earlyNets is the endpoint whose routes and neighbours an apply
	// wrote while its policy programs loaded (apply); the apply that
	// installs them does not write them again.
	earlyNets *model.Endpoint
	// epIfindex is the interface index ep was last programmed on: the
	// interface may be re-created (a new ifindex, failed closed) before
	// the endpoint's removal arrives.
	epIfindex int
	// host: one of the node's own interfaces, policed by the host entry
	// programs for a host endpoint (hostendpoints.go); hostFlags: its
	// ifstate entry says HOST.
	host, hostFlags bool
	// stages: the host endpoint's forward, untracked and pre-DNAT policy
	// slots (hostendpoints.go); ifsFwd: 1 + the forward slot the ifstate
	// entry names (0: none); ifsStages: what dpd_hep_stages holds for it,
	// known once written or read.
	stages      [numStages]stageSlot
	ifsFwd      uint32
	ifsStages   tcbpf.HepStages
	stagesKnown bool
}

// unverify forgets what this process knows of the interface without
// asking the kernel: the next apply verifies everything, routes written
// early included (a link that went down lost them).
func (st *endpointState) unverify() {
	st.attachOK, st.verified, st.earlyNets = false, false, nil
}

// newState is the state of an interface first seen now.
func (e *endpointProgrammer) newState() *endpointState {
	return &endpointState{fresh: e.applied}
}

// resync makes the next apply of every interface re-read the kernel
// instead of trusting what this process did.
func (e *endpointProgrammer) resync() {
	for _, st := range e.eps {
		st.unverify()
	}
}

// EndpointDetails is the kernel's view of a programmed endpoint, for Inspect.
type EndpointDetails struct {
	Ifindex        int
	Slot           uint32
	AttachMode     string
	IngressProgram string
	EgressProgram  string
	Ready          bool
	LastProgrammed time.Time
}

// details returns what is programmed on iface.
func (e *endpointProgrammer) details(iface string) (EndpointDetails, bool) {
	st, ok := e.eps[iface]
	if !ok {
		return EndpointDetails{}, false
	}
	d := EndpointDetails{Ifindex: st.ifindex, Slot: st.slot, AttachMode: string(st.mode), Ready: st.ready, LastProgrammed: st.lastApply}
	if sp := st.inst[model.Ingress]; sp != nil {
		d.IngressProgram = sp.key.String()
	}
	if sp := st.inst[model.Egress]; sp != nil {
		d.EgressProgram = sp.key.String()
	}
	return d, true
}

// apply programs ep on its interface, in the order that keeps the
// interface fail-closed throughout: attach (ifstate not ready drops),
// install both policies, mark ready, then routes and neighbours. Each step
// reads first and writes only what differs, so re-applying an unchanged
// endpoint (a resync, a controller reconnect, the first apply after a
// restart that adopted it) writes nothing, and an interface that carries
// the entry programs already (failed closed when it appeared) becomes
// ready with map writes only. When only the policy changed since this
// process verified the interface, only the jump slots are written (a
// policy used by a thousand endpoints switches in milliseconds); the
// periodic resync verifies the rest.
//
// When the entry programs must be attached first, apply returns the plan
// for it and writes nothing more: the caller attaches without the lock
// (attachq.go), records the result and applies again. When a policy
// program of ep is still being preloaded, apply returns a plan to wait for
// it; an interface that drops everything meanwhile (attached, not ready)
// gets its routes and neighbours first, so that they are written while
// the programs load.
func (e *endpointProgrammer) apply(ep *model.Endpoint) (applyPlan, error) {
	st := e.eps[ep.Iface]
	if st == nil {
		st = e.newState()
		e.eps[ep.Iface] = st
	}
	prev := st.ep
	st.ep, st.adopted = ep, false
	ifindex, ok := e.links.Ifindex(ep.Iface)
	if ok && st.verified && st.ifindex == ifindex && prev.SameInterface(ep) {
		if e.pols.loadingFor(ep) {
			return applyPlan{loads: true}, nil
		}
		return applyPlan{}, e.installPlaced(st)
	}
	st.verified = false
	if !ok {
		// Programmed when the monitor reports the interface. Its links
		// went with it; their pins would only keep them around.
		if st.ifindex != 0 {
			if err := e.entry.RemoveLinkPins(ep.Iface); err != nil {
				e.log.Warn("remove link pins of a vanished interface", "iface", ep.Iface, "err", err)
			}
		}
		e.forgetIfindex(st)
		return applyPlan{}, nil
	}
	if st.ifindex != 0 && st.ifindex != ifindex {
		// The interface was recreated: the old ifindex's state is stale.
		e.forgetIfindex(st)
	}
	st.ifindex = ifindex
	if !st.attachOK {
		// Attach now, whether or not the worker has it queued: this
		// endpoint must not wait behind other interfaces.
		e.queue.take(ep.Iface)
		return applyPlan{attach: &attachPlan{st: st, name: ep.Iface, ifindex: ifindex, query: !st.fresh || st.mode != ""}}, nil
	}
	if e.afterAttach != nil {
		e.afterAttach(ep.Iface)
	}
	if e.pols.loadingFor(ep) {
		if !st.ready && st.earlyNets != ep {
			// The interface drops everything until ready.
			if gone, err := e.configure(st, ep, ifindex); gone || err != nil {
				return applyPlan{}, err
			}
			st.earlyNets = ep
		}
		return applyPlan{loads: true}, nil
	}
	old, err := e.placeSlot(st, groupOf(ep))
	if err != nil {
		return applyPlan{}, err
	}
	defer func() { e.undoMove(ep.Iface, st, old) }() // nil once switched
	if !st.ready && !st.closed {
		// Attached but not yet policed: drop until the policy is in. An
		// interface failed closed drops already, whatever slot its entry
		// names.
		if err := e.setIfState(st, abi.IfWorkload); err != nil {
			return applyPlan{}, fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
	}
	if err := e.installBoth(st); err != nil {
		return applyPlan{}, err
	}
	if !st.ready || st.ifsSlot != st.slot {
		// Ready, or moved to another slot (an adopted entry whose slot
		// another interface held): the entry switches atomically.
		if err := e.setIfState(st, abi.IfWorkload|abi.IfReady); err != nil {
			return applyPlan{}, fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
	}
	e.finishMove(ep.Iface, old)
	old = nil
	if early := st.earlyNets == ep && st.epIfindex == ifindex; !early {
		if gone, err := e.configure(st, ep, ifindex); gone || err != nil {
			return applyPlan{}, err
		}
	}
	st.verified = true
	st.lastApply = time.Now()
	return applyPlan{}, nil
}

// endApply ends an ApplyEndpoint of iface: routes written early count for
// that call only.
func (e *endpointProgrammer) endApply(iface string) {
	if st := e.eps[iface]; st != nil {
		st.earlyNets = nil
	}
}

// applyPlan is what ApplyEndpoint does before applying again: attach the
// entry programs, or wait for policy programs being preloaded; neither:
// the apply is complete.
type applyPlan struct {
	attach *attachPlan
	loads  bool
}

// configure writes ep's routes and neighbours on ifindex. An interface
// that vanished meanwhile is no error but gone: the monitor will say so.
func (e *endpointProgrammer) configure(st *endpointState, ep *model.Endpoint, ifindex int) (gone bool, err error) {
	configure := e.net.ConfigureEndpoint
	if st.fresh && !st.configured {
		configure = e.net.ConfigureNewEndpoint // nothing to read back
		// Once only: after a partial write (or for other nets) the next
		// apply must read what is there.
		st.configured = true
	}
	if err := configure(ep.Iface, ifindex, ep.MAC, endpointNets(ep)); err != nil {
		if errors.Is(err, nl.ErrNoLink) {
			return true, nil
		}
		return false, fmt.Errorf("configure %s: %w", ep.Iface, err)
	}
	st.configured, st.epIfindex = true, ifindex
	return false, nil
}

// installPlaced is the apply of an endpoint whose interface this process
// verified and that only changed policies: into the slot of its group (or
// its own), and when the slot changed the ifstate entry switches to it.
func (e *endpointProgrammer) installPlaced(st *endpointState) error {
	old, err := e.placeSlot(st, groupOf(st.ep))
	if err != nil {
		st.verified = false
		return err
	}
	if err := e.installBoth(st); err != nil {
		e.undoMove(st.ep.Iface, st, old)
		return err
	}
	if st.ifsSlot != st.slot || !st.ready {
		if err := e.setIfState(st, abi.IfWorkload|abi.IfReady); err != nil {
			e.undoMove(st.ep.Iface, st, old)
			st.verified = false
			return fmt.Errorf("ifstate %s: %w", st.ep.Iface, err)
		}
	}
	e.finishMove(st.ep.Iface, old)
	return nil
}

// installBoth installs the ingress and egress policies.
func (e *endpointProgrammer) installBoth(st *endpointState) error {
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if err := e.install(st, dir); err != nil {
			st.verified = false
			return err
		}
	}
	st.lastApply = time.Now()
	return nil
}

// setIfState writes the interface's dpd_ifstate entry. Without
// IfReady the entry programs drop everything.
func (e *endpointProgrammer) setIfState(st *endpointState, flags uint32) error {
	slot := uint32(0)
	if st.hasSlot {
		slot = st.slot
	}
	if err := e.entry.SetIfState(st.ifindex, slot, flags); err != nil {
		return err
	}
	e.ops.IfStateWrites++
	st.ifsSlot = slot
	st.ready = flags&abi.IfReady != 0
	st.closed = !st.ready
	return nil
}

// install puts the program for dir into the endpoint's jump slot when
// it differs from what is there, then releases the old one.
func (e *endpointProgrammer) install(st *endpointState, dir model.Direction) error {
	sp, err := e.pols.acquire(st.ep.Policy(dir), dir)
	if err != nil {
		return fmt.Errorf("%s policy for %s: %w", dir, st.ep.Iface, err)
	}
	if g := st.grp; g != nil {
		// The group's slot: written by the first member applied with sp.
		if err := e.installGroup(g, dir, sp); err != nil {
			e.pols.release(sp)
			return fmt.Errorf("install %s policy for %s: %w", dir, st.ep.Iface, err)
		}
	}
	if st.inst[dir] == sp {
		e.pols.release(sp) // already installed: drop the extra reference
		return nil
	}
	if st.grp == nil {
		if err := e.entry.InstallPolicy(st.slot, int(dir), sp.prog); err != nil {
			e.pols.release(sp)
			return fmt.Errorf("install %s policy for %s: %w", dir, st.ep.Iface, err)
		}
		e.ops.JumpWrites++
	}
	old := st.inst[dir]
	st.inst[dir] = sp
	e.pols.release(old)
	return nil
}

// forgetIfindex drops the kernel state tied to an interface index that
// no longer exists (the programs and links went with the interface).
func (e *endpointProgrammer) forgetIfindex(st *endpointState) {
	if st.ifindex != 0 {
		if err := e.entry.DeleteIfState(st.ifindex); err != nil {
			e.log.Debug("delete stale ifstate", "ifindex", st.ifindex, "err", err)
		} else {
			e.ops.IfStateWrites++
		}
	}
	st.ifindex = 0
	st.ready = false
	st.closed = false
	st.mode = ""
	st.unverify()
	st.configured = false
}

// remove takes back what apply added for ep, and never detaches: an
// interface that still exists is failed closed by one dpd_ifstate write
// (its entry programs stay and drop everything; the kernel drops them with
// the interface, and their link pins stay until then, since removing a
// TCX link's last pin would detach it), then the endpoint's routes,
// neighbours, jump slots and policy programs go. The interface stays
// tracked as failed closed, so a later endpoint on it becomes ready with
// map writes only. What belonged to an interface that no longer exists
// goes entirely.
func (e *endpointProgrammer) remove(ep *model.Endpoint) error {
	st, ok := e.eps[ep.Iface]
	if !ok {
		return nil
	}
	nets := endpointNets(ep)
	if st.ep != nil {
		nets = endpointNets(st.ep)
	}
	ifindex, exists := e.links.Ifindex(ep.Iface)
	if exists && ifindex == st.ifindex {
		if err := e.closeRemoved(ep.Iface, st, nets); err != nil {
			return err
		}
		if !st.attachOK && st.mode == "" {
			// Its programs were never attached (its apply failed first):
			// the worker attaches them, failed closed.
			e.queue.put(ep.Iface, ifindex)
		}
		return nil
	}
	if err := e.dropState(ep.Iface, st, nil, false); err != nil {
		return err
	}
	delete(e.eps, ep.Iface)
	if exists {
		// Re-created and not reported yet: its report fails it closed,
		// and so does this.
		e.queue.put(ep.Iface, ifindex)
	}
	return nil
}

// closeRemoved fails closed the interface of an endpoint that is removed
// (or that the controller no longer sends after a restart), then removes
// the endpoint's routes, neighbours and policies, leaving st tracked as a
// failed-closed interface. The entry programs stay attached.
func (e *endpointProgrammer) closeRemoved(iface string, st *endpointState, nets []netip.Prefix) error {
	if !st.closed || st.ifsSlot != 0 {
		// One map write: the entry programs drop everything from now on.
		// Slot 0, so the entry names no slot another endpoint may get.
		if err := e.entry.SetIfState(st.ifindex, 0, abi.IfWorkload); err != nil {
			return fmt.Errorf("fail closed %s: %w", iface, err)
		}
		e.ops.IfStateWrites++
		st.ifsSlot, st.ready, st.closed = 0, false, true
	}
	var errs []error
	if len(nets) > 0 {
		if err := e.net.UnconfigureEndpoint(iface, nets); err != nil {
			errs = append(errs, fmt.Errorf("unconfigure %s: %w", iface, err))
		}
	}
	if err := e.releasePolicies(iface, st); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	st.ep, st.adopted = nil, false
	st.verified, st.configured, st.epIfindex = false, false, 0
	return nil
}

// releasePolicies clears the endpoint's jump slots, releases its policy
// programs and frees its slot.
func (e *endpointProgrammer) releasePolicies(iface string, st *endpointState) error {
	if e.releasePreview != nil {
		e.releasePreview(iface)
	}
	if g := st.grp; g != nil {
		// Only the group's last member clears its slot.
		for dir, sp := range st.inst {
			e.pols.release(sp)
			st.inst[dir] = nil
		}
		st.grp, st.hasSlot = nil, false
		return e.leaveGroup(g)
	}
	var errs []error
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if st.inst[dir] == nil && !st.hasSlot {
			continue
		}
		if st.hasSlot {
			if err := e.entry.ClearPolicy(st.slot, int(dir)); err != nil {
				errs = append(errs, fmt.Errorf("clear %s policy of %s: %w", dir, iface, err))
				continue
			}
			e.ops.JumpWrites++
		}
		e.pols.release(st.inst[dir])
		st.inst[dir] = nil
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if st.hasSlot {
		e.slots.put(st.slot)
		st.hasSlot = false
	}
	return nil
}

// dropState undoes everything programmed for iface, whose interface is
// gone (or, with detach, is no workload interface any more): its link pins
// unless an interface of that name exists (they are its, then), the
// ifstate entry, the policies in its slot and the slot itself. Only
// detach detaches; it also removes routes and neighbours. The caller
// forgets st on success.
func (e *endpointProgrammer) dropState(iface string, st *endpointState, nets []netip.Prefix, detach bool) error {
	var errs []error
	_, exists := e.links.Ifindex(iface)
	switch {
	case detach && exists:
		if err := e.entry.Detach(st.ifindex, iface); err != nil {
			errs = append(errs, fmt.Errorf("detach %s: %w", iface, err))
		} else {
			e.ops.Detaches++
		}
		if err := e.net.UnconfigureEndpoint(iface, nets); err != nil {
			errs = append(errs, fmt.Errorf("unconfigure %s: %w", iface, err))
		}
	case !exists:
		if err := e.entry.RemoveLinkPins(iface); err != nil {
			errs = append(errs, err)
		}
	}
	if st.ifindex != 0 && !e.ifindexTaken(st.ifindex, st) {
		if err := e.entry.DeleteIfState(st.ifindex); err != nil {
			errs = append(errs, fmt.Errorf("ifstate %s: %w", iface, err))
		} else {
			e.ops.IfStateWrites++
		}
	}
	if err := e.releasePolicies(iface, st); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ifindexTaken reports whether a state other than st holds ifindex
// (a renamed interface is known under its new name).
func (e *endpointProgrammer) ifindexTaken(ifindex int, st *endpointState) bool {
	for _, o := range e.eps {
		if o != st && o.ifindex == ifindex {
			return true
		}
	}
	return false
}
