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
	if !st.ready || st.ifsSlot != st.slot || !st.hostFlags {
		if err := e.setIfState(st, abi.IfHost|abi.IfReady); err != nil {
			return fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
		st.hostFlags = true
	}
	st.epIfindex = ifindex
	st.lastApply = time.Now()
	return nil
}

var errNoInterface = errors.New("no such interface")

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
	return e.releasePolicies(iface, st)
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
