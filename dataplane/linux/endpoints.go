package linux

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

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

// newEndpointStateLocked is the state of an interface first seen now.
func (k *Kernel) newEndpointStateLocked() *endpointState {
	return &endpointState{fresh: k.applied}
}

var _ engine.Resyncer = (*Kernel)(nil)

// Resync implements engine.Resyncer: the next ApplyEndpoint of every
// interface re-reads the kernel instead of trusting what this process did.
func (k *Kernel) Resync() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, st := range k.eps {
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

// Endpoint returns what is programmed on iface.
func (k *Kernel) Endpoint(iface string) (EndpointDetails, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.eps[iface]
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

// ApplyEndpoint programs ep on its interface, in the order that keeps the
// interface fail-closed throughout: attach (ifstate not ready drops),
// install both policies, mark ready, then routes and neighbours. Each step
// reads first and writes only what differs, so re-applying an unchanged
// endpoint (a resync, a controller reconnect, the first apply after a
// restart that adopted it) writes nothing. When only the policy changed
// since this process verified the interface, only the jump slots are
// written (a policy used by a thousand endpoints switches in milliseconds);
// the periodic resync verifies the rest.
func (k *Kernel) ApplyEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.eps[ep.Iface]
	if st == nil {
		st = k.newEndpointStateLocked()
		k.eps[ep.Iface] = st
	}
	prev := st.ep
	st.ep, st.adopted = ep, false
	ifindex, ok := k.mon.Ifindex(ep.Iface)
	if ok && st.verified && st.ifindex == ifindex && prev.SameInterface(ep) {
		return k.installBothLocked(st)
	}
	st.verified = false
	if !ok {
		// Programmed when the monitor reports the interface. Its links
		// went with it; their pins would only keep them around.
		if st.ifindex != 0 {
			if err := k.bpf.RemoveLinkPins(ep.Iface); err != nil {
				k.log.Warn("remove link pins of a vanished interface", "iface", ep.Iface, "err", err)
			}
		}
		k.forgetIfindexLocked(st)
		return nil
	}
	if st.ifindex != 0 && st.ifindex != ifindex {
		// The interface was recreated: the old ifindex's state is stale.
		k.forgetIfindexLocked(st)
	}
	st.ifindex = ifindex
	if !st.hasSlot {
		s, err := k.slots.get()
		if err != nil {
			return err
		}
		st.slot, st.hasSlot = s, true
	}
	if err := k.attachLocked(st, ep.Iface); err != nil {
		return err
	}
	if k.opts.AfterAttach != nil {
		k.opts.AfterAttach(ep.Iface)
	}
	if !st.ready {
		// Attached but not yet policed: drop until the policy is in.
		if err := k.setIfStateLocked(st, abi.IfWorkload); err != nil {
			return fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
	}
	if err := k.installBothLocked(st); err != nil {
		return err
	}
	if !st.ready || st.ifsSlot != st.slot {
		// Ready, or moved to another slot (an adopted entry whose slot
		// another interface held): the entry switches atomically.
		if err := k.setIfStateLocked(st, abi.IfWorkload|abi.IfReady); err != nil {
			return fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
	}
	configure := k.cfg.ConfigureEndpoint
	if st.fresh && !st.configured {
		configure = k.cfg.ConfigureNewEndpoint // nothing to read back
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

// installBothLocked installs the ingress and egress policies.
func (k *Kernel) installBothLocked(st *endpointState) error {
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if err := k.installLocked(st, dir); err != nil {
			st.verified = false
			return err
		}
	}
	st.lastApply = time.Now()
	return nil
}

// attachLocked attaches the entry programs unless they already are, as
// they are after a restart or a fail-closed attach. An attachment this
// process made or checked at this ifindex is trusted until the next resync.
func (k *Kernel) attachLocked(st *endpointState, iface string) error {
	if st.attachOK {
		return nil
	}
	// A fresh interface has nothing attached to look for (and Attach is
	// idempotent should something be there after all).
	if !st.fresh || st.mode != "" {
		if mode, ok := k.bpf.AttachedCurrent(st.ifindex, iface); ok {
			st.mode, st.attachOK = mode, true
			return nil
		}
	}
	mode, err := k.bpf.Attach(st.ifindex, iface)
	if err != nil {
		return fmt.Errorf("attach %s: %w", iface, err)
	}
	k.ops.Attaches++
	st.mode, st.attachOK = mode, true
	return nil
}

// setIfStateLocked writes the interface's dpd_ifstate entry. Without
// IfReady the entry programs drop everything.
func (k *Kernel) setIfStateLocked(st *endpointState, flags uint32) error {
	slot := uint32(0)
	if st.hasSlot {
		slot = st.slot
	}
	if err := k.bpf.SetIfState(st.ifindex, slot, flags); err != nil {
		return err
	}
	k.ops.IfStateWrites++
	st.ifsSlot = slot
	st.ready = flags&abi.IfReady != 0
	st.closed = !st.ready
	return nil
}

// installLocked puts the program for dir into the endpoint's jump slot when
// it differs from what is there, then releases the old one.
func (k *Kernel) installLocked(st *endpointState, dir model.Direction) error {
	sp, err := k.acquireLocked(st.ep.Policy(dir), dir)
	if err != nil {
		return fmt.Errorf("%s policy for %s: %w", dir, st.ep.Iface, err)
	}
	if st.inst[dir] == sp {
		k.releaseLocked(sp) // already installed: drop the extra reference
		return nil
	}
	if err := k.bpf.InstallPolicy(st.slot, int(dir), sp.prog.Head()); err != nil {
		k.releaseLocked(sp)
		return fmt.Errorf("install %s policy for %s: %w", dir, st.ep.Iface, err)
	}
	k.ops.JumpWrites++
	old := st.inst[dir]
	st.inst[dir] = sp
	k.releaseLocked(old)
	return nil
}

// forgetIfindexLocked drops the kernel state tied to an interface index that
// no longer exists (the programs and links went with the interface).
func (k *Kernel) forgetIfindexLocked(st *endpointState) {
	if st.ifindex != 0 {
		if err := k.bpf.DeleteIfState(st.ifindex); err != nil {
			k.log.Debug("delete stale ifstate", "ifindex", st.ifindex, "err", err)
		} else {
			k.ops.IfStateWrites++
		}
	}
	st.ifindex = 0
	st.ready = false
	st.closed = false
	st.mode = ""
	st.attachOK, st.verified, st.configured = false, false, false
}

// RemoveEndpoint removes everything ApplyEndpoint added for ep.
func (k *Kernel) RemoveEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.eps[ep.Iface]
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
	if err := k.dropStateLocked(ep.Iface, st, nets); err != nil {
		return err
	}
	delete(k.eps, ep.Iface)
	if ifindex, ok := k.mon.Ifindex(ep.Iface); recreated && ok {
		fc := k.newEndpointStateLocked()
		if err := k.failCloseLocked(ep.Iface, fc, ifindex); err != nil {
			k.log.Warn("cannot fail closed a re-created interface; it may pass unpoliced traffic", "iface", ep.Iface, "err", err)
		}
		if fc.ifindex != 0 {
			k.eps[ep.Iface] = fc
		}
	}
	return nil
}

// dropStateLocked undoes everything programmed for iface: attachments and
// their pins, routes and neighbours, the ifstate entry, the policies in
// its slot and the slot itself. The caller forgets st on success.
func (k *Kernel) dropStateLocked(iface string, st *endpointState, nets []netip.Prefix) error {
	var errs []error
	if ifindex, ok := k.mon.Ifindex(iface); ok {
		if err := k.bpf.Detach(ifindex, iface); err != nil {
			errs = append(errs, fmt.Errorf("detach %s: %w", iface, err))
		} else {
			k.ops.Detaches++
		}
		if err := k.cfg.UnconfigureEndpoint(iface, nets); err != nil {
			errs = append(errs, fmt.Errorf("unconfigure %s: %w", iface, err))
		}
	} else if err := k.bpf.RemoveLinkPins(iface); err != nil {
		errs = append(errs, err)
	}
	if st.ifindex != 0 && !k.ifindexTakenLocked(st.ifindex, st) {
		if err := k.bpf.DeleteIfState(st.ifindex); err != nil {
			errs = append(errs, fmt.Errorf("ifstate %s: %w", iface, err))
		} else {
			k.ops.IfStateWrites++
		}
	}
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if st.inst[dir] == nil && !st.hasSlot {
			continue
		}
		if st.hasSlot {
			if err := k.bpf.ClearPolicy(st.slot, int(dir)); err != nil {
				errs = append(errs, fmt.Errorf("clear %s policy of %s: %w", dir, iface, err))
				continue
			}
			k.ops.JumpWrites++
		}
		k.releaseLocked(st.inst[dir])
		st.inst[dir] = nil
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if st.hasSlot {
		k.slots.put(st.slot)
		st.hasSlot = false
	}
	return nil
}

// ifindexTakenLocked reports whether a state other than st holds ifindex
// (a renamed interface is known under its new name).
func (k *Kernel) ifindexTakenLocked(ifindex int, st *endpointState) bool {
	for _, o := range k.eps {
		if o != st && o.ifindex == ifindex {
			return true
		}
	}
	return false
}
