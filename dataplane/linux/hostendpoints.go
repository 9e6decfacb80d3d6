package linux

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

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
	SetHepStages(ifindex int, s tcbpf.HepStages) error
	AllHepStages() (map[int]tcbpf.HepStages, error)
	SetToHostAction(action, slot uint32) error
	ToHostAction() (action, slot uint32, err error)
}

// A host endpoint's extra policy stages, each in a slot of its own.
const (
	stageForward = iota
	stageUntracked
	stagePreDNAT
	numStages
)

// stageSlot is one stage's slot and the programs installed there.
type stageSlot struct {
	slot uint32
	has  bool
	inst [2]*sharedProg
}

// stagePolicy is ep's policy of stage i (nil: none).
func stagePolicy(ep *model.Endpoint, i int) *model.HostStage {
	if ep == nil {
		return nil
	}
	return [numStages]*model.HostStage{ep.Forward, ep.Untracked, ep.PreDNAT}[i]
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
	if st.grp != nil {
		// An adopted workload interface's group slot: not the host's.
		if err := e.releasePolicies(ep.Iface, st); err != nil {
			return err
		}
	}
	if err := e.slots.ensure(&st.slot, &st.hasSlot); err != nil {
		return err
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
	for i := range numStages {
		if err := e.installStage(st, i); err != nil {
			return err
		}
	}
	want := tcbpf.HepStages{Untracked: st.stages[stageUntracked].named(ep, stageUntracked),
		PreDNAT: st.stages[stagePreDNAT].named(ep, stagePreDNAT)}
	if !st.stagesKnown || st.ifsStages != want {
		if err := e.host.SetHepStages(ifindex, want); err != nil {
			return fmt.Errorf("host stages %s: %w", ep.Iface, err)
		}
		e.ops.IfStateWrites++
		st.ifsStages, st.stagesKnown = want, true
	}
	fwd := st.stages[stageForward].named(ep, stageForward)
	if !st.ready || st.ifsSlot != st.slot || !st.hostFlags || st.ifsFwd != fwd {
		if err := e.setIfState(st, abi.IfHost|abi.IfReady|fwd<<abi.IfFwdShift); err != nil {
			return fmt.Errorf("ifstate %s: %w", ep.Iface, err)
		}
		st.hostFlags, st.ifsFwd = true, fwd
	}
	for i := range numStages {
		if !hasStage(stagePolicy(ep, i)) && st.stages[i].has {
			// Nothing names the slot any more: free it.
			if err := e.releaseStage(ep.Iface, st, i); err != nil {
				return err
			}
		}
	}
	st.epIfindex = ifindex
	st.lastApply = time.Now()
	return nil
}

var errNoInterface = errors.New("no such interface")

// hasStage: f evaluates some direction.
func hasStage(f *model.HostStage) bool { return f != nil && (f.HasIngress || f.HasEgress) }

// named is what the maps name for stage i of ep: 1 + its slot, or 0.
func (s *stageSlot) named(ep *model.Endpoint, i int) uint32 {
	if s.has && hasStage(stagePolicy(ep, i)) {
		return s.slot + 1
	}
	return 0
}

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
		return fmt.Errorf("remove link pins of %s: %w", iface, err)
	}
	st.mode, st.attachOK = "", false
	if st.ifindex != 0 && (!st.stagesKnown || st.ifsStages != (tcbpf.HepStages{})) {
		if err := e.host.SetHepStages(st.ifindex, tcbpf.HepStages{}); err != nil {
			return fmt.Errorf("host stages %s: %w", iface, err)
		}
		e.ops.IfStateWrites++
		st.ifsStages, st.stagesKnown = tcbpf.HepStages{}, true
	}
	st.ifsFwd = 0
	errs := []error{e.releasePolicies(iface, st)}
	for i := range numStages {
		errs = append(errs, e.releaseStage(iface, st, i))
	}
	return errors.Join(errs...)
}

// installStage installs stage i's policy of each direction that has one
// into the stage's slot (allocated on first need) and clears the
// directions that have none. It writes nothing that is there.
func (e *endpointProgrammer) installStage(st *endpointState, i int) error {
	fw := stagePolicy(st.ep, i)
	if !hasStage(fw) {
		return nil // releaseStage frees the slot once the maps let go
	}
	ss := &st.stages[i]
	if err := e.slots.ensure(&ss.slot, &ss.has); err != nil {
		return err
	}
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		pol, ok := fw.Policy(dir)
		if !ok {
			if ss.inst[dir] != nil {
				if err := e.entry.ClearPolicy(ss.slot, int(dir)); err != nil {
					return fmt.Errorf("clear stage %d %s policy of %s: %w", i, dir, st.ep.Iface, err)
				}
				e.ops.JumpWrites++
				e.pols.release(ss.inst[dir])
				ss.inst[dir] = nil
			}
			continue
		}
		sp, err := e.pols.acquire(pol, dir)
		if err != nil {
			return fmt.Errorf("stage %d %s policy for %s: %w", i, dir, st.ep.Iface, err)
		}
		if ss.inst[dir] == sp {
			e.pols.release(sp)
			continue
		}
		if err := e.entry.InstallPolicy(ss.slot, int(dir), sp.prog); err != nil {
			e.pols.release(sp)
			return fmt.Errorf("install stage %d %s policy for %s: %w", i, dir, st.ep.Iface, err)
		}
		e.ops.JumpWrites++
		old := ss.inst[dir]
		ss.inst[dir] = sp
		e.pols.release(old)
	}
	return nil
}

// releaseStage clears stage i's slot, releases its programs and frees it.
// The maps must not name it any more.
func (e *endpointProgrammer) releaseStage(iface string, st *endpointState, i int) error {
	return e.releaseSlot(fmt.Sprintf("%s stage %d", iface, i), &st.stages[i])
}

// hostStages reads dpd_hep_stages (none without host support).
func (e *endpointProgrammer) hostStages() (map[int]tcbpf.HepStages, error) {
	if e.host == nil {
		return nil, nil
	}
	return e.host.AllHepStages()
}

// adoptStages rebuilds an adopted host interface's stage slots from its
// ifstate entry's forward slot and its dpd_hep_stages entry, reserving
// the slots and taking the programs installed there.
func (e *endpointProgrammer) adoptStages(st *endpointState, fwd uint32, hs tcbpf.HepStages,
	byHead map[ebpf.ProgramID]*sharedProg, installed map[uint32][2]ebpf.ProgramID) {
	st.ifsFwd = fwd
	if e.host != nil {
		st.ifsStages, st.stagesKnown = hs, true
	}
	for i, named := range [numStages]uint32{fwd, hs.Untracked, hs.PreDNAT} {
		if named == 0 || !e.slots.reserve(named-1) {
			continue
		}
		ss := &st.stages[i]
		ss.slot, ss.has = named-1, true
		for _, dir := range []model.Direction{model.Ingress, model.Egress} {
			if sp := byHead[installed[named-1][dir]]; sp != nil && sp.key.dir == dir {
				ss.inst[dir] = sp
				sp.refs++
			}
		}
	}
}

// sweepHostStages deletes the dpd_hep_stages entries of interfaces no
// state holds (counted with the ifstate entries).
func (e *endpointProgrammer) sweepHostStages(live map[int]bool, r *GCReport) error {
	all, err := e.hostStages()
	if err != nil {
		return err
	}
	var errs []error
	for ifindex := range all {
		if live[ifindex] {
			continue
		}
		if err := e.host.SetHepStages(ifindex, tcbpf.HepStages{}); err != nil {
			errs = append(errs, err)
			continue
		}
		e.ops.IfStateWrites++
		r.IfStates++
	}
	return errors.Join(errs...)
}

// toHostState is DefaultEndpointToHostAction as the kernel holds it: the
// action, and the wildcard host endpoint's ingress policy Return applies
// in a slot of its own.
type toHostState struct {
	action uint32 // abi.ToHost*
	stage  stageSlot
	named  uint32 // 1 + the slot dpd_hep_cfg names (0: none)
	known  bool   // dpd_hep_cfg was read or written
	// claimed: the engine said what it wants (ApplyToHostPolicy); an
	// adopted policy it never claimed is collected after the first apply.
	claimed bool
}

// writeToHost writes dpd_hep_cfg when it differs from what it holds.
func (e *endpointProgrammer) writeToHost(action, named uint32) error {
	th := &e.toHost
	if th.known && th.action == action && th.named == named {
		return nil
	}
	if err := e.host.SetToHostAction(action, named); err != nil {
		return err
	}
	e.ops.IfStateWrites++
	th.action, th.named, th.known = action, named, true
	return nil
}

// applyToHost installs pol (nil: none) as the policy Return applies to
// workload traffic to the host, then names it in dpd_hep_cfg; without
// one, the entry goes first and the slot after.
func (e *endpointProgrammer) applyToHost(pol *model.DirectionPolicy) error {
	if e.host == nil {
		return errNoHostFacility
	}
	th := &e.toHost
	th.claimed = true
	if pol == nil {
		if err := e.writeToHost(th.action, 0); err != nil {
			return err
		}
		return e.releaseSlot("to-host", &th.stage)
	}
	ss := &th.stage
	if err := e.slots.ensure(&ss.slot, &ss.has); err != nil {
		return err
	}
	sp, err := e.pols.acquire(pol, model.Ingress)
	if err != nil {
		return fmt.Errorf("to-host policy: %w", err)
	}
	if ss.inst[model.Ingress] == sp {
		e.pols.release(sp)
	} else {
		if err := e.entry.InstallPolicy(ss.slot, int(model.Ingress), sp.prog); err != nil {
			e.pols.release(sp)
			return fmt.Errorf("install to-host policy: %w", err)
		}
		e.ops.JumpWrites++
		old := ss.inst[model.Ingress]
		ss.inst[model.Ingress] = sp
		e.pols.release(old)
	}
	return e.writeToHost(th.action, ss.slot+1)
}

// adoptToHost takes over the to-host policy an earlier dpd installed.
func (e *endpointProgrammer) adoptToHost(byHead map[ebpf.ProgramID]*sharedProg, installed map[uint32][2]ebpf.ProgramID) {
	if e.host == nil {
		return
	}
	action, named, err := e.host.ToHostAction()
	if err != nil {
		e.log.Warn("read DefaultEndpointToHostAction", "err", err)
		return
	}
	th := &e.toHost
	th.action, th.named, th.known = action, named, true
	if named == 0 || !e.slots.reserve(named-1) {
		return
	}
	th.stage.slot, th.stage.has = named-1, true
	if sp := byHead[installed[named-1][model.Ingress]]; sp != nil && sp.key.dir == model.Ingress {
		th.stage.inst[model.Ingress] = sp
		sp.refs++
	}
}

// sweepToHost withdraws an adopted to-host policy the engine did not
// claim: no wildcard host endpoint wants it any more.
func (e *endpointProgrammer) sweepToHost(r *GCReport) error {
	th := &e.toHost
	if e.host == nil || th.claimed || !th.stage.has {
		return nil
	}
	if err := e.applyToHost(nil); err != nil {
		return err
	}
	th.claimed = false
	r.Programs++
	return nil
}

// hostJumpEntries counts the dpd_jump entries of host endpoints beyond
// their interface slots: the two continuations (tcbpf installs them at
// open), the stage slots and the to-host slot, for MapUsage.
func (e *endpointProgrammer) hostJumpEntries() int {
	n := 2
	count := func(ss *stageSlot) {
		for _, sp := range ss.inst {
			if sp != nil {
				n++
			}
		}
	}
	for _, st := range e.eps {
		for i := range st.stages {
			count(&st.stages[i])
		}
	}
	count(&e.toHost.stage)
	return n
}

// releaseSlot clears a stage slot that nothing names any more and frees it.
func (e *endpointProgrammer) releaseSlot(what string, ss *stageSlot) error {
	if !ss.has {
		return nil
	}
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if err := e.entry.ClearPolicy(ss.slot, int(dir)); err != nil {
			return fmt.Errorf("clear %s %s policy: %w", what, dir, err)
		}
		e.ops.JumpWrites++
		e.pols.release(ss.inst[dir])
		ss.inst[dir] = nil
	}
	e.slots.put(ss.slot)
	ss.has = false
	return nil
}

// whileOpen runs f under the lock unless the kernel is closed.
func (k *Kernel) whileOpen(f func() error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return errKernelClosed
	}
	defer k.noteApplyLocked()
	return f()
}

// ApplyToHostPolicy implements engine.ToHostKernel.
func (k *Kernel) ApplyToHostPolicy(pol *model.DirectionPolicy) error {
	return k.whileOpen(func() error { return k.eps.applyToHost(pol) })
}

// ApplyHostEndpoint implements engine.HostEndpointKernel.
func (k *Kernel) ApplyHostEndpoint(ep *model.Endpoint) error {
	return k.whileOpen(func() error { return k.eps.applyHost(ep) })
}

// RemoveHostEndpoint implements engine.HostEndpointKernel.
func (k *Kernel) RemoveHostEndpoint(ep *model.Endpoint) error {
	return k.whileOpen(func() error { return k.eps.removeHost(ep) })
}
