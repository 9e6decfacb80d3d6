package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// dispatch hands one validated message to its manager. Managers only
// record state and mark it dirty; nothing here touches the kernel. A
// message that still fails to parse is counted as invalid and changes
// nothing that is applied.
func (e *Engine) dispatch(msg *felix.ToDataplane, recv time.Time) {
	kind := felixconv.PayloadKind(msg)
	e.received.Add(1)
	e.met.received.WithLabelValues(kind).Inc()
	var err error
	switch p := msg.GetPayload().(type) {
	case *felix.ToDataplane_InSync:
		e.onInSync()
	case *felix.ToDataplane_ConfigUpdate:
		err = e.onConfigUpdate(p.ConfigUpdate)

	case *felix.ToDataplane_IpsetUpdate:
		err = e.onIPSetUpdate(p.IpsetUpdate)
	case *felix.ToDataplane_IpsetDeltaUpdate:
		err = e.onIPSetDelta(p.IpsetDeltaUpdate)
	case *felix.ToDataplane_IpsetRemove:
		err = e.onIPSetRemove(p.IpsetRemove)

	case *felix.ToDataplane_ActivePolicyUpdate:
		err = e.onPolicyUpdate(p.ActivePolicyUpdate)
	case *felix.ToDataplane_ActivePolicyRemove:
		err = e.onPolicyRemove(p.ActivePolicyRemove)
	case *felix.ToDataplane_ActiveProfileUpdate:
		err = e.onProfileUpdate(p.ActiveProfileUpdate)
	case *felix.ToDataplane_ActiveProfileRemove:
		err = e.onProfileRemove(p.ActiveProfileRemove)

	case *felix.ToDataplane_WorkloadEndpointUpdate:
		err = e.onWorkloadUpdate(p.WorkloadEndpointUpdate, recv)
	case *felix.ToDataplane_WorkloadEndpointRemove:
		err = e.onWorkloadRemove(p.WorkloadEndpointRemove)
	case *felix.ToDataplane_HostEndpointUpdate:
		err = e.onHostEndpointUpdate(p.HostEndpointUpdate)
	case *felix.ToDataplane_HostEndpointRemove:
		err = e.onHostEndpointRemove(p.HostEndpointRemove)

	case *felix.ToDataplane_RouteUpdate:
		err = e.onRouteUpdate(p.RouteUpdate)
	case *felix.ToDataplane_RouteRemove:
		err = e.onRouteRemove(p.RouteRemove)
	case *felix.ToDataplane_ServiceUpdate:
		err = e.onServiceUpdate(p.ServiceUpdate)
	case *felix.ToDataplane_ServiceRemove:
		err = e.onServiceRemove(p.ServiceRemove)
	case *felix.ToDataplane_ServiceBackendsUpdate:
		err = e.onBackendsUpdate(p.ServiceBackendsUpdate)
	case *felix.ToDataplane_ServiceBackendsRemove:
		err = e.onBackendsRemove(p.ServiceBackendsRemove)

	case *felix.ToDataplane_HostMetadataUpdate:
		err = e.onHostMetadataUpdate(p.HostMetadataUpdate)
	case *felix.ToDataplane_HostMetadataRemove:
		err = e.onHostMetadataRemove(p.HostMetadataRemove)
	case *felix.ToDataplane_VtepUpdate:
		err = e.onVTEPUpdate(p.VtepUpdate)
	case *felix.ToDataplane_VtepRemove:
		err = e.onVTEPRemove(p.VtepRemove)

	// Stored and acknowledged; not yet enforced by dpd.
	case *felix.ToDataplane_IpamPoolUpdate:
		e.acks.put(kindIPAMPool, p.IpamPoolUpdate.GetId(), p.IpamPoolUpdate, e.log)
	case *felix.ToDataplane_IpamPoolRemove:
		e.acks.remove(kindIPAMPool, p.IpamPoolRemove.GetId())
	case *felix.ToDataplane_NamespaceUpdate:
		e.acks.put(kindNamespace, p.NamespaceUpdate.GetId().GetName(), p.NamespaceUpdate, e.log)
	case *felix.ToDataplane_NamespaceRemove:
		e.acks.remove(kindNamespace, p.NamespaceRemove.GetId().GetName())
	case *felix.ToDataplane_ServiceAccountUpdate:
		e.acks.put(kindServiceAccount, saKey(p.ServiceAccountUpdate.GetId()), p.ServiceAccountUpdate, e.log)
	case *felix.ToDataplane_ServiceAccountRemove:
		e.acks.remove(kindServiceAccount, saKey(p.ServiceAccountRemove.GetId()))
	case *felix.ToDataplane_WireguardEndpointUpdate:
		e.acks.put(kindWireguard, p.WireguardEndpointUpdate.GetHostname(), p.WireguardEndpointUpdate, e.log)
	case *felix.ToDataplane_WireguardEndpointRemove:
		e.acks.remove(kindWireguard, p.WireguardEndpointRemove.GetHostname())
	case *felix.ToDataplane_WireguardEndpointV6Update:
		e.acks.put(kindWireguardV6, p.WireguardEndpointV6Update.GetHostname(), p.WireguardEndpointV6Update, e.log)
	case *felix.ToDataplane_WireguardEndpointV6Remove:
		e.acks.remove(kindWireguardV6, p.WireguardEndpointV6Remove.GetHostname())
	case *felix.ToDataplane_GlobalBgpConfigUpdate:
		e.acks.put(kindGlobalBGP, "", p.GlobalBgpConfigUpdate, e.log)
	case *felix.ToDataplane_Encapsulation:
		e.acks.put(kindEncapsulation, "", p.Encapsulation, e.log)

	default:
		err = fmt.Errorf("unknown payload %T", p)
	}
	if err != nil {
		e.countInvalid(kind, err)
	}
}

func saKey(id *felix.ServiceAccountID) string {
	return id.GetNamespace() + "/" + id.GetName()
}

func (e *Engine) countInvalid(kind string, err error) {
	e.invalid.Add(1)
	e.met.invalid.WithLabelValues(kind).Inc()
	e.log.Warn("invalid message ignored", "payload", kind, "err", err)
}

// onReject records a message that failed validation. It is counted; when
// it concerns a workload endpoint, that endpoint goes to "error" with the
// reason, and whatever the kernel enforces for it stays.
func (e *Engine) onReject(msg *felix.ToDataplane, reason error) {
	kind := felixconv.PayloadKind(msg)
	e.received.Add(1)
	e.met.received.WithLabelValues(kind).Inc()
	e.countInvalid(kind, reason)
	if id, fid, raw, ok := rejectedEndpoint(msg, reason); ok {
		e.weps.markInvalid(id, fid, raw, reason.Error())
	}
}

// rejectedEndpoint finds the workload endpoint a rejected message
// concerns: the one the validation error names, else a valid id in a
// WorkloadEndpointUpdate.
func rejectedEndpoint(msg *felix.ToDataplane, reason error) (model.WorkloadID, *felix.WorkloadEndpointID, *felix.WorkloadEndpoint, bool) {
	u := msg.GetWorkloadEndpointUpdate()
	var ce *felixconv.Error
	if errors.As(reason, &ce) && ce.Endpoint != nil {
		return *ce.Endpoint, wepFID(*ce.Endpoint), u.GetEndpoint(), true
	}
	if u == nil {
		return model.WorkloadID{}, nil, nil, false
	}
	id, err := felixconv.Endpoint(u.GetId())
	if err != nil {
		return model.WorkloadID{}, nil, nil, false
	}
	return id, u.GetId(), u.GetEndpoint(), true
}
