package client

import (
	"slices"
	"strings"

	"github.com/dpd-dev/dpd/proto/felix"
	"google.golang.org/protobuf/proto"
)

// desired is a keyed desired state built from ToDataplane messages: per
// object identity the latest update, a removal, or (for an IP set whose
// full membership it never saw) the net delta. It is how a replay equals
// the caller's current state: snapshot() folded, then what was sent with
// Send folded on top.
type desired struct {
	order []string // keys in first-seen order, for a stable replay
	items map[string]*desiredItem
}

type desiredItem struct {
	msg     *felix.ToDataplane // latest update; nil when removed or delta-only
	removed bool
	// Net delta of an IP set known only through IPSetDeltaUpdate.
	added, dropped map[string]struct{}
}

func newDesired() *desired { return &desired{items: map[string]*desiredItem{}} }

// record folds msg into the state; msg is kept, not copied. Messages
// without an identity (InSync, unknown payloads) are not state.
func (d *desired) record(msg *felix.ToDataplane) {
	key, removal := identity(msg)
	if key == "" {
		return
	}
	it := d.items[key]
	if it == nil {
		it = &desiredItem{}
		d.items[key] = it
		d.order = append(d.order, key)
	}
	if delta := msg.GetIpsetDeltaUpdate(); delta != nil {
		it.foldDelta(delta.GetAddedMembers(), delta.GetRemovedMembers())
		return
	}
	*it = desiredItem{msg: msg, removed: removal}
}

func (it *desiredItem) foldDelta(added, removed []string) {
	switch {
	case it.removed:
		// A delta to a removed set changes nothing that exists.
	case it.msg != nil:
		upd := it.msg.GetIpsetUpdate()
		upd.Members = applyDelta(upd.Members, added, removed)
	default:
		if it.added == nil {
			it.added, it.dropped = map[string]struct{}{}, map[string]struct{}{}
		}
		for _, m := range added {
			it.added[m] = struct{}{}
			delete(it.dropped, m)
		}
		for _, m := range removed {
			it.dropped[m] = struct{}{}
			delete(it.added, m)
		}
	}
}

// overlay puts it (from Send) over the same key of d (from a snapshot).
func (d *desired) overlay(key string, it *desiredItem) {
	cur := d.items[key]
	if it.msg == nil && !it.removed { // delta-only: fold into the snapshot's set
		if cur != nil && cur.msg != nil && !cur.removed {
			upd := cur.msg.GetIpsetUpdate()
			upd.Members = applyDelta(upd.Members, sortedKeys(it.added), sortedKeys(it.dropped))
		}
		return
	}
	if cur == nil {
		d.order = append(d.order, key)
	}
	d.items[key] = &desiredItem{msg: it.msg, removed: it.removed}
}

// messages returns the state as updates, in first-seen order.
func (d *desired) messages() []*felix.ToDataplane {
	out := make([]*felix.ToDataplane, 0, len(d.order))
	for _, k := range d.order {
		if it := d.items[k]; it.msg != nil && !it.removed {
			out = append(out, it.msg)
		}
	}
	return out
}

// replay is what a new stream must carry before InSync: snapshot (copied:
// the caller keeps its messages) with the tracked state on top.
func (d *desired) replay(snapshot []*felix.ToDataplane) []*felix.ToDataplane {
	base := newDesired()
	for _, m := range snapshot {
		base.record(proto.CloneOf(m))
	}
	for _, k := range d.order {
		base.overlay(k, d.items[k])
	}
	return base.messages()
}

func applyDelta(members, added, removed []string) []string {
	drop := make(map[string]struct{}, len(removed))
	for _, m := range removed {
		drop[m] = struct{}{}
	}
	out := make([]string, 0, len(members)+len(added))
	have := make(map[string]struct{}, len(members)+len(added))
	for _, m := range slices.Concat(members, added) {
		if _, gone := drop[m]; gone {
			continue
		}
		if _, dup := have[m]; !dup {
			have[m] = struct{}{}
			out = append(out, m)
		}
	}
	return out
}

func sortedKeys(m map[string]struct{}) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// identity names the object msg is about, and whether msg removes it.
// "" means msg is not state (InSync) or an unknown payload.
func identity(msg *felix.ToDataplane) (key string, removal bool) {
	j := func(kind string, parts ...string) string { return kind + ":" + strings.Join(parts, "/") }
	wep := func(id *felix.WorkloadEndpointID) string {
		return j("wep", id.GetOrchestratorId(), id.GetWorkloadId(), id.GetEndpointId())
	}
	pol := func(id *felix.PolicyID) string {
		return j("policy", id.GetName(), id.GetNamespace(), id.GetKind())
	}
	switch p := msg.GetPayload().(type) {
	case *felix.ToDataplane_IpsetUpdate:
		return j("ipset", p.IpsetUpdate.GetId()), false
	case *felix.ToDataplane_IpsetDeltaUpdate:
		return j("ipset", p.IpsetDeltaUpdate.GetId()), false
	case *felix.ToDataplane_IpsetRemove:
		return j("ipset", p.IpsetRemove.GetId()), true
	case *felix.ToDataplane_ActiveProfileUpdate:
		return j("profile", p.ActiveProfileUpdate.GetId().GetName()), false
	case *felix.ToDataplane_ActiveProfileRemove:
		return j("profile", p.ActiveProfileRemove.GetId().GetName()), true
	case *felix.ToDataplane_ActivePolicyUpdate:
		return pol(p.ActivePolicyUpdate.GetId()), false
	case *felix.ToDataplane_ActivePolicyRemove:
		return pol(p.ActivePolicyRemove.GetId()), true
	case *felix.ToDataplane_HostEndpointUpdate:
		return j("hep", p.HostEndpointUpdate.GetId().GetEndpointId()), false
	case *felix.ToDataplane_HostEndpointRemove:
		return j("hep", p.HostEndpointRemove.GetId().GetEndpointId()), true
	case *felix.ToDataplane_WorkloadEndpointUpdate:
		return wep(p.WorkloadEndpointUpdate.GetId()), false
	case *felix.ToDataplane_WorkloadEndpointRemove:
		return wep(p.WorkloadEndpointRemove.GetId()), true
	case *felix.ToDataplane_ConfigUpdate:
		return "config", false
	case *felix.ToDataplane_HostMetadataUpdate:
		return j("host", p.HostMetadataUpdate.GetHostname()), false
	case *felix.ToDataplane_HostMetadataRemove:
		return j("host", p.HostMetadataRemove.GetHostname()), true
	case *felix.ToDataplane_IpamPoolUpdate:
		return j("pool", p.IpamPoolUpdate.GetId()), false
	case *felix.ToDataplane_IpamPoolRemove:
		return j("pool", p.IpamPoolRemove.GetId()), true
	case *felix.ToDataplane_ServiceAccountUpdate:
		return j("sa", p.ServiceAccountUpdate.GetId().GetNamespace(), p.ServiceAccountUpdate.GetId().GetName()), false
	case *felix.ToDataplane_ServiceAccountRemove:
		return j("sa", p.ServiceAccountRemove.GetId().GetNamespace(), p.ServiceAccountRemove.GetId().GetName()), true
	case *felix.ToDataplane_NamespaceUpdate:
		return j("ns", p.NamespaceUpdate.GetId().GetName()), false
	case *felix.ToDataplane_NamespaceRemove:
		return j("ns", p.NamespaceRemove.GetId().GetName()), true
	case *felix.ToDataplane_RouteUpdate:
		return j("route", p.RouteUpdate.GetDst()), false
	case *felix.ToDataplane_RouteRemove:
		return j("route", p.RouteRemove.GetDst()), true
	case *felix.ToDataplane_VtepUpdate:
		return j("vtep", p.VtepUpdate.GetNode()), false
	case *felix.ToDataplane_VtepRemove:
		return j("vtep", p.VtepRemove.GetNode()), true
	case *felix.ToDataplane_WireguardEndpointUpdate:
		return j("wg", p.WireguardEndpointUpdate.GetHostname()), false
	case *felix.ToDataplane_WireguardEndpointRemove:
		return j("wg", p.WireguardEndpointRemove.GetHostname()), true
	case *felix.ToDataplane_WireguardEndpointV6Update:
		return j("wg6", p.WireguardEndpointV6Update.GetHostname()), false
	case *felix.ToDataplane_WireguardEndpointV6Remove:
		return j("wg6", p.WireguardEndpointV6Remove.GetHostname()), true
	case *felix.ToDataplane_GlobalBgpConfigUpdate:
		return "bgp", false
	case *felix.ToDataplane_Encapsulation:
		return "encap", false
	case *felix.ToDataplane_ServiceUpdate:
		return j("svc", p.ServiceUpdate.GetNamespace(), p.ServiceUpdate.GetName()), false
	case *felix.ToDataplane_ServiceRemove:
		return j("svc", p.ServiceRemove.GetNamespace(), p.ServiceRemove.GetName()), true
	case *felix.ToDataplane_ServiceBackendsUpdate:
		return j("backends", p.ServiceBackendsUpdate.GetNamespace(), p.ServiceBackendsUpdate.GetName()), false
	case *felix.ToDataplane_ServiceBackendsRemove:
		return j("backends", p.ServiceBackendsRemove.GetNamespace(), p.ServiceBackendsRemove.GetName()), true
	}
	return "", false
}
