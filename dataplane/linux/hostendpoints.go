package linux

import (
	"errors"
	"fmt"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Host endpoints police the node's own interfaces with the host entry
// programs (bpf/dpd_hep.h). They share the workload endpoints' machinery
// where it is the same: an endpointState per interface (so adoption, the
// slots of dpd_jump, program sharing, garbage collection and Inspect
// cover them), policy programs from the policy programmer. They differ
// where a node must not lose its network: nothing is failed closed (the
// host programs pass everything until dpd_ifstate says READY|HOST, and
// again once it does not), removal detaches, and no route, neighbour or
// sysctl is touched.
//
// Between start-up and the first apply after InSync a host interface
// keeps what an earlier dpd attached and installed (adopted like a
// workload's: the same programs and policy keep policing it), or stays
// unpoliced if there is none. The first apply claims those the controller
// still binds (unchanged: no write); garbage collection then detaches the
// rest.

// hostFacility attaches the host entry programs and writes the failsafes.
type hostFacility interface {
	AttachHost(ifindex int, ifname string) (tcbpf.AttachMode, error)
	AttachedCurrentHost(ifindex int, ifname string) (tcbpf.AttachMode, bool)
	SetFailsafes(fs []tcbpf.Failsafe) error
}

var errNoHostFacility = errors.New("host endpoints are not supported by this datapath")

// applyHost makes ep's policy police traffic to and from the host through
// ep.Iface: entry programs attached (under the lock: host interfaces are
// few), both policies installed in the interface's slot, then READY|HOST.
// Each step reads first and writes only what differs.
func (e *endpointProgrammer) applyHost(ep *model.Endpoint) error {
	if e.host == nil {
		return errNoHostFacility
	}
	st := e.eps[ep.Iface]
	if st != nil && !st.host && st.ep != nil {
		return fmt.Errorf("host endpoint on %s: a workload endpoint holds it", ep.Iface)
	}
	ifindex, ok := e.links.Ifindex(ep.Iface)
	if !ok {
		return fmt.Errorf("host endpoint on %s: %w", ep.Iface, errNoInterface)
	}
	if st == nil {
		st = e.newState()
		e.eps[ep.Iface] = st
	}
	st.host, st.ep, st.adopted = true, ep, false
	if st.ifindex != 0 && st.ifindex != ifindex {
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
	mode, current := e.host.AttachedCurrentHost(ifindex, ep.Iface)
	if !current {
		// Replaces in place whatever dpd entry program is there.
		m, err := e.host.AttachHost(ifindex, ep.Iface)
		if err != nil {
			return fmt.Errorf("attach host programs to %s: %w", ep.Iface, err)
		}
		e.ops.Attaches++
		mode = m
	}
	st.mode, st.attachOK = mode, true
	if err := e.installBoth(st); err != nil {
		return err
	}
	if err := e.installForward(st); err != nil {
		return err
	}
	fwd := uint32(0)
	if st.hasFwd && hasForward(ep.Forward) {
		fwd = st.fwdSlot + 1
	}
	if !st.ready || st.ifsSlot != st.slot || !st.hostFlags || st.ifsFwd != fwd {
		if err := e.setIfState(st, abi.IfHost|abi.IfReady|fwd<<abi.IfFwdShift); err != nil {
			return fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
		st.hostFlags, st.ifsFwd = true, fwd
	}
	if !hasForward(st.ep.Forward) && st.hasFwd {
		// The ifstate entry no longer names the forward slot: free it.
		if err := e.releaseForward(ep.Iface, st); err != nil {
			return err
		}
	}
	st.epIfindex = ifindex
	st.lastApply = time.Now()
	return nil
}

var errNoInterface = errors.New("no such interface")

// hasForward: f polices some direction of forwarded traffic.
func hasForward(f *model.HostForward) bool { return f != nil && (f.HasIngress || f.HasEgress) }

// removeHost stops policing ep.Iface: its dpd_ifstate entry goes first (the
// host programs pass everything from then on), then the programs come
// off the interface and its policies and slot are released.
func (e *endpointProgrammer) removeHost(ep *model.Endpoint) error {
	st := e.eps[ep.Iface]
	if st == nil || !st.host {
		return nil
	}
	if err := e.dropHost(ep.Iface, st); err != nil {
		return err
	}
	delete(e.eps, ep.Iface)
	return nil
}

// dropHost undoes what applyHost did on iface (or what an earlier dpd did
// there, adopted): ifstate, attachment (or the pins of a vanished
// interface), policies and slot. Never a route or neighbour: the routes
// through a host interface are the node's.
func (e *endpointProgrammer) dropHost(iface string, st *endpointState) error {
	if st.ifindex != 0 && !e.ifindexTaken(st.ifindex, st) {
		if err := e.entry.DeleteIfState(st.ifindex); err != nil {
			return fmt.Errorf("unpolice %s: %w", iface, err)
		}
		e.ops.IfStateWrites++
		st.ready, st.hostFlags = false, false
	}
	if ifindex, exists := e.links.Ifindex(iface); exists && ifindex == st.ifindex {
		if err := e.entry.Detach(ifindex, iface); err != nil {
			return fmt.Errorf("detach %s: %w", iface, err)
		}
		e.ops.Detaches++
	} else if err := e.entry.RemoveLinkPins(iface); err != nil {
		return err
	}
	st.mode, st.attachOK = "", false
	st.ifsFwd = 0
	return errors.Join(e.releasePolicies(iface, st), e.releaseForward(iface, st))
}

// installForward installs the forward policy of each direction that has
// one into the interface's forward slot (allocated on first need) and
// clears the directions that have none. It writes nothing that is there.
func (e *endpointProgrammer) installForward(st *endpointState) error {
	fw := st.ep.Forward
	if !hasForward(fw) {
		return nil // releaseForward frees the slot once the ifstate entry lets go
	}
	if !st.hasFwd {
		s, err := e.slots.get()
		if err != nil {
			return err
		}
		st.fwdSlot, st.hasFwd = s, true
	}
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		pol, ok := fw.Policy(dir)
		if !ok {
			if st.instFwd[dir] != nil {
				if err := e.entry.ClearPolicy(st.fwdSlot, int(dir)); err != nil {
					return fmt.Errorf("clear forward %s policy of %s: %w", dir, st.ep.Iface, err)
				}
				e.ops.JumpWrites++
				e.pols.release(st.instFwd[dir])
				st.instFwd[dir] = nil
			}
			continue
		}
		sp, err := e.pols.acquire(pol, dir)
		if err != nil {
			return fmt.Errorf("forward %s policy for %s: %w", dir, st.ep.Iface, err)
		}
		if st.instFwd[dir] == sp {
			e.pols.release(sp)
			continue
		}
		if err := e.entry.InstallPolicy(st.fwdSlot, int(dir), sp.prog); err != nil {
			e.pols.release(sp)
			return fmt.Errorf("install forward %s policy for %s: %w", dir, st.ep.Iface, err)
		}
		e.ops.JumpWrites++
		old := st.instFwd[dir]
		st.instFwd[dir] = sp
		e.pols.release(old)
	}
	return nil
}

// releaseForward clears the forward slot, releases its programs and frees
// it. The ifstate entry must not name it any more.
func (e *endpointProgrammer) releaseForward(iface string, st *endpointState) error {
	if !st.hasFwd {
		return nil
	}
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if err := e.entry.ClearPolicy(st.fwdSlot, int(dir)); err != nil {
			return fmt.Errorf("clear forward %s policy of %s: %w", dir, iface, err)
		}
		e.ops.JumpWrites++
		e.pols.release(st.instFwd[dir])
		st.instFwd[dir] = nil
	}
	e.slots.put(st.fwdSlot)
	st.hasFwd = false
	return nil
}

// ApplyHostEndpoint implements engine.HostEndpointKernel.
func (k *Kernel) ApplyHostEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return errKernelClosed
	}
	return k.eps.applyHost(ep)
}

// RemoveHostEndpoint implements engine.HostEndpointKernel.
func (k *Kernel) RemoveHostEndpoint(ep *model.Endpoint) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return errKernelClosed
	}
	return k.eps.removeHost(ep)
}
