package linux

import (
	"errors"
	"fmt"
	"time"

	bpfdp "github.com/dpd-dev/dpd/dataplane/bpf"
	"github.com/dpd-dev/dpd/dataplane/bpf/abi"
	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// endpointState is what the kernel has programmed for one interface.
type endpointState struct {
	ep        *model.Endpoint
	ifindex   int // 0 while the interface is absent
	slot      uint32
	hasSlot   bool
	mode      bpfdp.AttachMode
	prog      [2]progKey // installed program per direction
	installed [2]bool
	ready     bool // ifstate says READY
	lastApply time.Time
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
	if st.installed[model.Ingress] {
		d.IngressProgram = st.prog[model.Ingress].String()
	}
	if st.installed[model.Egress] {
		d.EgressProgram = st.prog[model.Egress].String()
	}
	return d, true
}

// ApplyEndpoint programs ep on its interface, in the order that keeps the
// interface fail-closed throughout: attach (ifstate not ready drops),
// install both policies, mark ready, then routes and neighbours.
func (k *Kernel) ApplyEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.eps[ep.Iface]
	if st == nil {
		st = &endpointState{}
		k.eps[ep.Iface] = st
	}
	st.ep = ep
	ifindex, ok := k.mon.Ifindex(ep.Iface)
	if !ok {
		// Programmed when the monitor reports the interface.
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
	mode, err := k.bpf.Attach(ifindex, ep.Iface)
	if err != nil {
		return fmt.Errorf("attach %s: %w", ep.Iface, err)
	}
	st.mode = mode
	if !st.ready {
		// Attached but not yet policed: drop until the policy is in.
		if err := k.bpf.SetIfState(ifindex, st.slot, abi.IfWorkload); err != nil {
			return fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
	}
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if err := k.installLocked(st, dir); err != nil {
			return err
		}
	}
	if !st.ready {
		if err := k.bpf.SetIfState(ifindex, st.slot, abi.IfWorkload|abi.IfReady); err != nil {
			return fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
		st.ready = true
	}
	if err := k.cfg.ConfigureEndpoint(ep.Iface, ifindex, ep.MAC, ep.IPv4Nets); err != nil {
		if errors.Is(err, nl.ErrNoLink) {
			return nil // vanished meanwhile; the monitor will say so
		}
		return fmt.Errorf("configure %s: %w", ep.Iface, err)
	}
	st.lastApply = time.Now()
	return nil
}

// installLocked puts the program for dir into the endpoint's jump slot when
// it differs from what is there, then releases the old one.
func (k *Kernel) installLocked(st *endpointState, dir model.Direction) error {
	key, sp, err := k.acquireLocked(st.ep.Policy(dir), dir)
	if err != nil {
		return fmt.Errorf("%s policy for %s: %w", dir, st.ep.Iface, err)
	}
	if st.installed[dir] && st.prog[dir] == key {
		k.releaseLocked(key) // already installed: drop the extra reference
		return nil
	}
	if err := k.bpf.InstallPolicy(st.slot, int(dir), sp.prog.Head()); err != nil {
		k.releaseLocked(key)
		return fmt.Errorf("install %s policy for %s: %w", dir, st.ep.Iface, err)
	}
	old, had := st.prog[dir], st.installed[dir]
	st.prog[dir], st.installed[dir] = key, true
	if had {
		k.releaseLocked(old)
	}
	return nil
}

// forgetIfindexLocked drops the kernel state tied to an interface index that
// no longer exists (the programs and links went with the interface).
func (k *Kernel) forgetIfindexLocked(st *endpointState) {
	if st.ifindex != 0 {
		if err := k.bpf.DeleteIfState(st.ifindex); err != nil {
			k.log.Debug("delete stale ifstate", "ifindex", st.ifindex, "err", err)
		}
	}
	st.ifindex = 0
	st.ready = false
	st.mode = ""
}

// RemoveEndpoint removes everything ApplyEndpoint added for ep.
func (k *Kernel) RemoveEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, ok := k.eps[ep.Iface]
	if !ok {
		return nil
	}
	var errs []error
	if ifindex, ok := k.mon.Ifindex(ep.Iface); ok {
		if err := k.bpf.Detach(ifindex, ep.Iface); err != nil {
			errs = append(errs, fmt.Errorf("detach %s: %w", ep.Iface, err))
		}
		if err := k.cfg.UnconfigureEndpoint(ep.Iface, st.ep.IPv4Nets); err != nil {
			errs = append(errs, fmt.Errorf("unconfigure %s: %w", ep.Iface, err))
		}
	}
	if st.ifindex != 0 {
		if err := k.bpf.DeleteIfState(st.ifindex); err != nil {
			errs = append(errs, fmt.Errorf("ifstate %s: %w", ep.Iface, err))
		}
	}
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if !st.installed[dir] {
			continue
		}
		if err := k.bpf.ClearPolicy(st.slot, int(dir)); err != nil {
			errs = append(errs, fmt.Errorf("clear %s policy of %s: %w", dir, ep.Iface, err))
			continue
		}
		k.releaseLocked(st.prog[dir])
		st.installed[dir] = false
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if st.hasSlot {
		k.slots.put(st.slot)
	}
	delete(k.eps, ep.Iface)
	return nil
}
