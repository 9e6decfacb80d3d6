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
// programmed (failclosed.go). Called under Kernel.mu.
type endpointProgrammer struct {
	entry entryFacility
	net   endpointNet
	links linkFacility
	pols  *policyProgrammer
	log   *slog.Logger
	ops   *Ops
	// afterAttach is Options.AfterAttach.
	afterAttach func(iface string)

	eps   map[string]*endpointState // by interface name
	slots slotAllocator
	// applied: the first apply after InSync has ended, so an interface
	// that appears now is fresh.
	applied bool
}

func newEndpointProgrammer(entry entryFacility, net endpointNet, links linkFacility, pols *policyProgrammer,
	slots uint32, log *slog.Logger, ops *Ops) *endpointProgrammer {
	return &endpointProgrammer{entry: entry, net: net, links: links, pols: pols, log: log, ops: ops,
		eps: map[string]*endpointState{}, slots: newSlotAllocator(slots)}
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
	// epIfindex is the interface index ep was last programmed on: the
	// interface may be re-created (a new ifindex, failed closed) before
	// the endpoint's removal arrives.
	epIfindex int
}

// newState is the state of an interface first seen now.
func (e *endpointProgrammer) newState() *endpointState {
	return &endpointState{fresh: e.applied}
}

// resync makes the next apply of every interface re-read the kernel
// instead of trusting what this process did.
func (e *endpointProgrammer) resync() {
	for _, st := range e.eps {
		st.attachOK, st.verified = false, false
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
// restart that adopted it) writes nothing. When only the policy changed
// since this process verified the interface, only the jump slots are
// written (a policy used by a thousand endpoints switches in milliseconds);
// the periodic resync verifies the rest.
func (e *endpointProgrammer) apply(ep *model.Endpoint) error {
	st := e.eps[ep.Iface]
	if st == nil {
		st = e.newState()
		e.eps[ep.Iface] = st
	}
	prev := st.ep
	st.ep, st.adopted = ep, false
	ifindex, ok := e.links.Ifindex(ep.Iface)
	if ok && st.verified && st.ifindex == ifindex && prev.SameInterface(ep) {
		return e.installBoth(st)
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
		return nil
	}
	if st.ifindex != 0 && st.ifindex != ifindex {
		// The interface was recreated: the old ifindex's state is stale.
		e.forgetIfindex(st)
	}
	st.ifindex = ifindex
	if !st.hasSlot {
		s, err := e.slots.get()
		if err != nil {
			return err
		}
		st.slot, st.hasSlot = s, true
	}
	if err := e.attach(st, ep.Iface); err != nil {
		return err
	}
	if e.afterAttach != nil {
		e.afterAttach(ep.Iface)
	}
	if !st.ready && !st.closed {
		// Attached but not yet policed: drop until the policy is in. An
		// interface failed closed drops already, whatever slot its entry
		// names.
		if err := e.setIfState(st, abi.IfWorkload); err != nil {
			return fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
	}
	if err := e.installBoth(st); err != nil {
		return err
	}
	if !st.ready || st.ifsSlot != st.slot {
		// Ready, or moved to another slot (an adopted entry whose slot
		// another interface held): the entry switches atomically.
		if err := e.setIfState(st, abi.IfWorkload|abi.IfReady); err != nil {
			return fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
	}
	configure := e.net.ConfigureEndpoint
	if st.fresh && !st.configured {
		configure = e.net.ConfigureNewEndpoint // nothing to read back
		// Once only: after a partial write (or for other nets) the next
		// apply must read what is there.
		st.configured = true
	}
	if err := configure(ep.Iface, ifindex, ep.MAC, ep.IPv4Nets); err != nil {
		if errors.Is(err, nl.ErrNoLink) {
			return nil // vanished meanwhile; the monitor will say so
		}
		return fmt.Errorf("configure %s: %w", ep.Iface, err)
	}
	st.configured, st.verified, st.epIfindex = true, true, ifindex
	st.lastApply = time.Now()
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

// attach attaches the entry programs unless they already are, as
// they are after a restart or a fail-closed attach. An attachment this
// process made or checked at this ifindex is trusted until the next resync.
func (e *endpointProgrammer) attach(st *endpointState, iface string) error {
	if st.attachOK {
		return nil
	}
	// A fresh interface has nothing attached to look for (and Attach is
	// idempotent should something be there after all).
	if !st.fresh || st.mode != "" {
		if mode, ok := e.entry.AttachedCurrent(st.ifindex, iface); ok {
			st.mode, st.attachOK = mode, true
			return nil
		}
	}
	mode, err := e.entry.Attach(st.ifindex, iface)
	if err != nil {
		return fmt.Errorf("attach %s: %w", iface, err)
	}
	e.ops.Attaches++
	st.mode, st.attachOK = mode, true
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
	if st.inst[dir] == sp {
		e.pols.release(sp) // already installed: drop the extra reference
		return nil
	}
	if err := e.entry.InstallPolicy(st.slot, int(dir), sp.prog); err != nil {
		e.pols.release(sp)
		return fmt.Errorf("install %s policy for %s: %w", dir, st.ep.Iface, err)
	}
	e.ops.JumpWrites++
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
	st.attachOK, st.verified, st.configured = false, false, false
}

// remove removes everything apply added for ep.
func (e *endpointProgrammer) remove(ep *model.Endpoint) error {
	st, ok := e.eps[ep.Iface]
	if !ok {
		return nil
	}
	nets := ep.IPv4Nets
	if st.ep != nil {
		nets = st.ep.IPv4Nets
	}
	// The interface was re-created since the endpoint was programmed (and
	// failed closed): what is on it now is not the endpoint's to take away.
	recreated := st.epIfindex != 0 && st.ifindex != 0 && st.ifindex != st.epIfindex
	if err := e.dropState(ep.Iface, st, nets); err != nil {
		return err
	}
	delete(e.eps, ep.Iface)
	if ifindex, ok := e.links.Ifindex(ep.Iface); recreated && ok {
		fc := e.newState()
		if err := e.failClose(ep.Iface, fc, ifindex); err != nil {
			e.log.Warn("cannot fail closed a re-created interface; it may pass unpoliced traffic", "iface", ep.Iface, "err", err)
		}
		if fc.ifindex != 0 {
			e.eps[ep.Iface] = fc
		}
	}
	return nil
}

// dropState undoes everything programmed for iface: attachments and
// their pins, routes and neighbours, the ifstate entry, the policies in
// its slot and the slot itself. The caller forgets st on success.
func (e *endpointProgrammer) dropState(iface string, st *endpointState, nets []netip.Prefix) error {
	var errs []error
	if ifindex, ok := e.links.Ifindex(iface); ok {
		if err := e.entry.Detach(ifindex, iface); err != nil {
			errs = append(errs, fmt.Errorf("detach %s: %w", iface, err))
		} else {
			e.ops.Detaches++
		}
		if err := e.net.UnconfigureEndpoint(iface, nets); err != nil {
			errs = append(errs, fmt.Errorf("unconfigure %s: %w", iface, err))
		}
	} else if err := e.entry.RemoveLinkPins(iface); err != nil {
		errs = append(errs, err)
	}
	if st.ifindex != 0 && !e.ifindexTaken(st.ifindex, st) {
		if err := e.entry.DeleteIfState(st.ifindex); err != nil {
			errs = append(errs, fmt.Errorf("ifstate %s: %w", iface, err))
		} else {
			e.ops.IfStateWrites++
		}
	}
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
