package linux

import (
	"errors"
	"fmt"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// Policy groups: the endpoints the engine resolved from the same policy
// references (model.Endpoint.PolicyGroup) always enforce the same
// policies, so they share one slot of dpd_jump, named by each member's
// dpd_ifstate entry. A change of a policy a thousand endpoints use is then
// one jump write per direction, made by the first member applied; from
// that write on every member enforces it, and the others' applies find it
// installed and write nothing. An endpoint without a group, or with staged
// previews (installed per interface, preview.go), has a slot of its own.
//
// A member holds a reference to the programs it was applied with (what
// Inspect shows); the group holds one to what its slot has installed, so
// a program stays loaded while either names it. After a restart the
// interfaces that name one slot form an unclaimed group (key ""), which
// the first member applied claims for its group when that needs no write
// (or when it is the only member); otherwise that member moves to a slot
// of its own group, so no interface ever runs another group's policy.

// slotGroup is a slot shared by the endpoints of one policy group.
type slotGroup struct {
	key   string // the PolicyGroup; "" while adopted and unclaimed
	slot  uint32
	inst  [2]*sharedProg // installed in the slot; the group's references
	users int            // endpoint states whose slot this is
}

// groupOf is the group ep's slot is shared with; "" for a slot of its own.
func groupOf(ep *model.Endpoint) string {
	if ep.PreviewIngress != nil || ep.PreviewEgress != nil {
		return ""
	}
	return ep.PolicyGroup
}

// placement is where an endpoint state's policies are installed.
type placement struct {
	grp     *slotGroup // nil: a slot of its own (if hasSlot)
	slot    uint32
	hasSlot bool
	inst    [2]*sharedProg
}

func (st *endpointState) placement() placement {
	return placement{grp: st.grp, slot: st.slot, hasSlot: st.hasSlot, inst: st.inst}
}

func (st *endpointState) place(p placement) {
	st.grp, st.slot, st.hasSlot, st.inst = p.grp, p.slot, p.hasSlot, p.inst
}

// placeSlot gives st the slot of group want (or, for "", one of its own).
// When st moves, the returned placement is what it held before: the
// caller installs the policies in the new slot, switches the ifstate
// entry, then finishMove frees the old one (undoMove on failure). nil:
// st stays in its slot, which may have become its group's or its own
// (the only member's): no transient second slot, no ifstate write.
func (e *endpointProgrammer) placeSlot(st *endpointState, want string) (*placement, error) {
	g := st.grp
	switch {
	case want == "" && g == nil:
		return nil, e.slots.ensure(&st.slot, &st.hasSlot)
	case want != "" && g != nil && g.key == want:
		return nil, nil
	case want != "" && g == nil && st.hasSlot && e.groups[want] == nil:
		// Its own slot becomes the group's, with what is installed there.
		ng := &slotGroup{key: want, slot: st.slot, inst: st.inst, users: 1}
		for _, sp := range ng.inst {
			if sp != nil {
				sp.refs++
			}
		}
		e.groups[want] = ng
		st.grp = ng
		return nil, nil
	case want != "" && g != nil && e.groups[want] == nil && (g.users == 1 || (g.key == "" && e.installedFor(g, st.ep))):
		// Its group's slot becomes the new group's: it is the only
		// member, or (adopted) what is installed is what it needs.
		if e.groups[g.key] == g {
			delete(e.groups, g.key)
		}
		g.key = want
		e.groups[want] = g
		return nil, nil
	case want == "" && g != nil && g.users == 1:
		// The last member keeps the slot as its own, with what is
		// installed there (and the group's references to it).
		if e.groups[g.key] == g {
			delete(e.groups, g.key)
		}
		old := st.inst
		st.inst, st.grp = g.inst, nil
		g.inst, g.users = [2]*sharedProg{}, 0
		for _, sp := range old {
			e.pols.release(sp)
		}
		return nil, nil
	}
	old := st.placement()
	st.place(placement{})
	if want == "" {
		if err := e.slots.ensure(&st.slot, &st.hasSlot); err != nil {
			st.place(old)
			return nil, err
		}
		return &old, nil
	}
	ng := e.groups[want]
	if ng == nil {
		s, err := e.slots.get()
		if err != nil {
			st.place(old)
			return nil, err
		}
		ng = &slotGroup{key: want, slot: s}
		e.groups[want] = ng
	}
	ng.users++
	st.grp, st.slot, st.hasSlot = ng, ng.slot, true
	return &old, nil
}

// installedFor reports whether g's slot has ep's policies installed.
func (e *endpointProgrammer) installedFor(g *slotGroup, ep *model.Endpoint) bool {
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		sp := g.inst[dir]
		if sp == nil || sp.key != (progKey{hash: ep.Policy(dir).Hash(), dir: dir}) {
			return false
		}
	}
	return true
}

// finishMove frees what st held before a move, once its ifstate entry
// names the new slot. A failure to clear the old slot is only logged: no
// interface names it any more.
func (e *endpointProgrammer) finishMove(iface string, old *placement) {
	if old == nil {
		return
	}
	if err := e.releasePlacement(iface, *old); err != nil {
		e.log.Warn("release the earlier policy slot", "iface", iface, "err", err)
	}
}

// undoMove puts st back where it was before a move that failed before its
// ifstate entry switched, freeing what the move took.
func (e *endpointProgrammer) undoMove(iface string, st *endpointState, old *placement) {
	if old == nil {
		return
	}
	cur := st.placement()
	st.place(*old)
	if err := e.releasePlacement(iface, cur); err != nil {
		e.log.Warn("release a policy slot after a failed apply", "iface", iface, "err", err)
	}
}

// releasePlacement drops p's references and leaves its group, or clears
// and frees its own slot.
func (e *endpointProgrammer) releasePlacement(iface string, p placement) error {
	if p.grp != nil {
		for _, sp := range p.inst {
			e.pols.release(sp)
		}
		return e.leaveGroup(p.grp)
	}
	if !p.hasSlot {
		for _, sp := range p.inst {
			e.pols.release(sp)
		}
		return nil
	}
	st := &endpointState{slot: p.slot, hasSlot: true, inst: p.inst}
	return e.releasePolicies(iface, st)
}

// leaveGroup takes one member off g; the last one clears its slot,
// releases its programs and frees it. A slot that cannot be cleared stays
// allocated (with its programs) rather than be handed out while installed.
func (e *endpointProgrammer) leaveGroup(g *slotGroup) error {
	g.users--
	if g.users > 0 {
		return nil
	}
	if e.groups[g.key] == g {
		delete(e.groups, g.key)
	}
	var errs []error
	for _, dir := range []model.Direction{model.Ingress, model.Egress} {
		if err := e.entry.ClearPolicy(g.slot, int(dir)); err != nil {
			errs = append(errs, fmt.Errorf("clear %s policy of a group slot: %w", dir, err))
			continue
		}
		e.ops.JumpWrites++
		e.pols.release(g.inst[dir])
		g.inst[dir] = nil
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	e.slots.put(g.slot)
	return nil
}

// installGroup makes sp what g's slot has installed for dir.
func (e *endpointProgrammer) installGroup(g *slotGroup, dir model.Direction, sp *sharedProg) error {
	if g.inst[dir] == sp {
		return nil
	}
	if err := e.entry.InstallPolicy(g.slot, int(dir), sp.prog); err != nil {
		return err
	}
	e.ops.JumpWrites++
	sp.refs++ // the group's own reference
	old := g.inst[dir]
	g.inst[dir] = sp
	e.pols.release(old)
	return nil
}

// adoptShared records that st, adopted, names slot as well as owner,
// which reserved it: both are members of one unclaimed group.
func (e *endpointProgrammer) adoptShared(owner, st *endpointState, slot uint32) {
	g := owner.grp
	if g == nil {
		g = &slotGroup{slot: slot, inst: owner.inst, users: 1}
		for _, sp := range g.inst {
			if sp != nil {
				sp.refs++
			}
		}
		owner.grp = g
	}
	g.users++
	st.grp, st.slot, st.hasSlot, st.inst = g, slot, true, g.inst
	for _, sp := range st.inst {
		if sp != nil {
			sp.refs++
		}
	}
}
