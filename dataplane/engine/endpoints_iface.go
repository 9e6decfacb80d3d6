package engine

import (
	"slices"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// ifaceIndex maps interfaces to the endpoints naming them and keeps what
// decides which of several live endpoints naming one interface holds it:
// the one the kernel holds there, else the one that named it first. The
// others get status "error" and are not programmed until it lets go.
type ifaceIndex struct {
	refIndex[string]
	since   map[model.WorkloadID]uint64 // when the endpoint began naming its interface
	next    uint64
	seen    map[model.WorkloadID]string // the interface the apply path last evaluated it on
	applied map[string]model.WorkloadID // the endpoint the kernel holds on each interface
}

func (x *ifaceIndex) init() {
	x.refIndex.init()
	x.since = map[model.WorkloadID]uint64{}
	x.seen = map[model.WorkloadID]string{}
	x.applied = map[string]model.WorkloadID{}
}

// set replaces ep's interface; naming the same one again keeps its place.
func (x *ifaceIndex) set(ep model.WorkloadID, ifaces []string) {
	if len(ifaces) > 0 && slices.Equal(x.byEP[ep], ifaces) {
		return
	}
	x.refIndex.set(ep, ifaces)
	if len(ifaces) == 0 {
		delete(x.since, ep)
		return
	}
	x.next++
	x.since[ep] = x.next
}

// ifaceHolder returns the endpoint that holds iface and whether it is
// another than id.
func (m *endpointManager) ifaceHolder(id model.WorkloadID, iface string) (model.WorkloadID, bool) {
	if h, ok := m.byIface.applied[iface]; ok {
		return h, h != id
	}
	first, at := id, m.byIface.since[id]
	for u := range m.byIface.users(iface) {
		if ent := m.eps[u]; ent == nil || ent.removed {
			continue
		}
		if s := m.byIface.since[u]; s < at {
			first, at = u, s
		}
	}
	return first, first != id
}

// evaluatedOn records that the apply path evaluated id on iface ("": id
// is gone). When that leaves an interface, the others naming it are
// re-evaluated: one of them may hold it now.
func (m *endpointManager) evaluatedOn(id model.WorkloadID, iface string) {
	old, ok := m.byIface.seen[id]
	if ok && old == iface {
		return
	}
	if iface == "" {
		delete(m.byIface.seen, id)
	} else {
		m.byIface.seen[id] = iface
	}
	if ok {
		m.dirtyClaimants(old, id)
	}
}

// appliedOn records that the kernel now holds ep for id (nil: nothing);
// an interface it let go of goes to the next endpoint naming it.
func (m *endpointManager) appliedOn(id model.WorkloadID, old, ep *model.Endpoint) {
	if old != nil && (ep == nil || ep.Iface != old.Iface) && m.byIface.applied[old.Iface] == id {
		delete(m.byIface.applied, old.Iface)
		m.dirtyClaimants(old.Iface, id)
	}
	if ep != nil {
		m.byIface.applied[ep.Iface] = id
	}
}

func (m *endpointManager) dirtyClaimants(iface string, except model.WorkloadID) {
	for u := range m.byIface.users(iface) {
		if u != except {
			m.markDirty(u)
		}
	}
}
