package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// errUnknownPayload counts a message whose payload this build does not
// know: a newer controller's addition is not applied, and not fatal.
var errUnknownPayload = errors.New("payload unknown to this build")

// dispatch hands one update to its manager. Managers only record state and
// mark it dirty; nothing here touches the kernel. An update that is
// inconsistent with what the engine holds (a delta for an unknown set) is
// counted as invalid and changes nothing that is applied.
func (e *Engine) dispatch(u model.Update, recv time.Time) {
	kind := u.Kind()
	e.received.Add(1)
	e.met.receivedFor(kind).Inc()
	var err error
	switch u := u.(type) {
	case *model.InSync:
		e.onInSync()
	case *model.ConfigUpdate:
		e.onConfigUpdate(u)

	case *model.IPSetUpdate:
		e.onIPSetUpdate(u)
	case *model.IPSetDeltaUpdate:
		err = e.onIPSetDelta(u)
	case *model.IPSetRemove:
		e.onIPSetRemove(u)

	case *model.ActivePolicyUpdate:
		e.onPolicyUpdate(u)
	case *model.ActivePolicyRemove:
		e.onPolicyRemove(u)
	case *model.ActiveProfileUpdate:
		e.onProfileUpdate(u)
	case *model.ActiveProfileRemove:
		e.onProfileRemove(u)

	case *model.WorkloadEndpointUpdate:
		e.onWorkloadUpdate(u, recv)
	case *model.WorkloadEndpointRemove:
		e.onWorkloadRemove(u)
	case *model.HostEndpointUpdate:
		e.onHostEndpointUpdate(u)
	case *model.HostEndpointRemove:
		e.onHostEndpointRemove(u)

	case *model.RouteUpdate:
		e.onRouteUpdate(u)
	case *model.RouteRemove:
		e.onRouteRemove(u)
	case *model.ServiceUpdate:
		e.onServiceUpdate(u)
	case *model.ServiceRemove:
		e.onServiceRemove(u)
	case *model.ServiceBackendsUpdate:
		e.onBackendsUpdate(u)
	case *model.ServiceBackendsRemove:
		e.onBackendsRemove(u)

	case *model.HostMetadataUpdate:
		e.onHostMetadataUpdate(u)
	case *model.HostMetadataRemove:
		e.onHostMetadataRemove(u)
	case *model.VTEPUpdate:
		e.onVTEPUpdate(u)
	case *model.VTEPRemove:
		e.onVTEPRemove(u)

	// Stored and acknowledged; not yet enforced by dpd.
	case *model.StoredUpdate:
		e.acks.putUpdate(u, e.log)
	case *model.StoredRemove:
		e.acks.remove(u.Object, u.Key)

	case *model.Unknown:
		err = errUnknownPayload
	default:
		err = fmt.Errorf("unhandled update %T", u)
	}
	if err != nil {
		e.countInvalid(kind, err)
	}
}

func (e *Engine) countInvalid(kind string, err error) {
	e.invalid.Add(1)
	e.met.invalid.WithLabelValues(kind).Inc()
	e.log.Warn("invalid message ignored", "payload", kind, "err", err)
}

// onReject records a message that failed translation. It is counted; when
// it names a workload or host endpoint, that endpoint goes to "error" with
// the reason and fails closed: what it enforced before may be more
// permissive than what the controller meant.
func (e *Engine) onReject(r model.Rejection) {
	e.received.Add(1)
	e.met.receivedFor(r.Kind).Inc()
	e.countInvalid(r.Kind, errors.New(r.String()))
	if r.Endpoint != nil {
		e.weps.markInvalid(*r.Endpoint, r.String())
	}
	if r.HostEndpoint != "" {
		e.heps.markInvalid(r.HostEndpoint, r.String())
	}
	if r.Policy != nil && e.policies.reject(*r.Policy, r.String()) {
		e.weps.dirtyUsers(e.weps.polUsers.users(*r.Policy))
		e.heps.refChanged()
	}
	if r.Profile != "" && e.profiles.reject(r.Profile, r.String()) {
		e.weps.dirtyUsers(e.weps.profUsers.users(r.Profile))
		e.heps.refChanged()
	}
}
