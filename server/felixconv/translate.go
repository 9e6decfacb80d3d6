package felixconv

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// errUnhandled marks a payload case this package does not know; a test
// walks every oneof case so that adding one to the proto without a rule
// here fails.
var errUnhandled = errors.New("no translation rule for this payload")

// Translate parses msg, each field once, into the update the engine
// consumes. A failure is an *Error naming the message's kind and sequence
// number and, when it concerns a workload endpoint whose id is valid, the
// endpoint. A message without a payload this build knows becomes
// model.Unknown: upstream adds payload kinds over time, and the engine
// counts what it does not know rather than dropping the controller.
func Translate(msg *felix.ToDataplane) (model.Update, error) {
	if msg == nil {
		return nil, &Error{Kind: KindUnknown, Reason: "nil message"}
	}
	u, ep, err := translatePayload(msg)
	if err != nil {
		fe := &Error{Seq: msg.SequenceNumber, Kind: PayloadKind(msg), Endpoint: ep, HostEndpoint: hostEndpointOf(msg),
			Reason: err.Error()}
		fe.Policy, fe.Profile = rulesOf(msg)
		return nil, fe
	}
	return model.WithSeq(u, msg.SequenceNumber), nil
}

// rulesOf names the policy or profile a failed update is for, when its id
// is valid: what it enforced may be more permissive than what the
// controller meant, so its users must stop enforcing it. Removals are not
// named: a removal that fails leaves nothing more permissive behind.
func rulesOf(msg *felix.ToDataplane) (*model.PolicyKey, string) {
	switch p := msg.Payload.(type) {
	case *felix.ToDataplane_ActivePolicyUpdate:
		if k, err := PolicyKeyOf(p.ActivePolicyUpdate.GetId()); err == nil {
			return &k, ""
		}
	case *felix.ToDataplane_ActiveProfileUpdate:
		return nil, p.ActiveProfileUpdate.GetId().GetName()
	}
	return nil, ""
}

// hostEndpointOf names the host endpoint a failed message concerns, when
// it is a host endpoint's update or removal with an id: its interfaces
// must stop enforcing what they had.
func hostEndpointOf(msg *felix.ToDataplane) string {
	switch p := msg.Payload.(type) {
	case *felix.ToDataplane_HostEndpointUpdate:
		return p.HostEndpointUpdate.GetId().GetEndpointId()
	case *felix.ToDataplane_HostEndpointRemove:
		return p.HostEndpointRemove.GetId().GetEndpointId()
	}
	return ""
}

// translatePayload translates msg's payload. On failure it returns the
// workload endpoint concerned, when there is one with a valid id.
func translatePayload(msg *felix.ToDataplane) (model.Update, *model.WorkloadID, error) {
	if p := msg.Payload; p != nil && reflect.ValueOf(p).IsNil() {
		// Only Go callers can build this; the wire cannot.
		return nil, nil, errors.New("payload wrapper is nil")
	}
	switch p := msg.Payload.(type) {
	case nil:
		return &model.Unknown{}, nil, nil
	case *felix.ToDataplane_InSync:
		return &model.InSync{}, nil, nil
	case *felix.ToDataplane_ConfigUpdate:
		return &model.ConfigUpdate{Config: p.ConfigUpdate.GetConfig()}, nil, nil

	case *felix.ToDataplane_WorkloadEndpointUpdate:
		id, err := Endpoint(p.WorkloadEndpointUpdate.GetId())
		if err != nil {
			return nil, nil, err
		}
		ep, err := workloadEndpoint(id, p.WorkloadEndpointUpdate.GetEndpoint())
		if err != nil {
			// A copy: taking id's own address would put it on the heap for
			// every update, not just the failing ones.
			blamed := id
			return nil, &blamed, err
		}
		return &model.WorkloadEndpointUpdate{Endpoint: ep}, nil, nil
	case *felix.ToDataplane_WorkloadEndpointRemove:
		id, err := Endpoint(p.WorkloadEndpointRemove.GetId())
		if err != nil {
			return nil, nil, err
		}
		return &model.WorkloadEndpointRemove{ID: id}, nil, nil
	}
	u, err := translatePolicy(msg)
	return u, nil, err
}

// translatePolicy covers what endpoints' policy is made of: IP sets,
// policies and profiles, and host endpoints.
func translatePolicy(msg *felix.ToDataplane) (model.Update, error) {
	switch p := msg.Payload.(type) {
	case *felix.ToDataplane_IpsetUpdate:
		return ipsetUpdate(p.IpsetUpdate)
	case *felix.ToDataplane_IpsetDeltaUpdate:
		return ipsetDelta(p.IpsetDeltaUpdate)
	case *felix.ToDataplane_IpsetRemove:
		id := p.IpsetRemove.GetId()
		if err := required("ip set id", id); err != nil {
			return nil, err
		}
		return &model.IPSetRemove{ID: id}, nil

	case *felix.ToDataplane_ActivePolicyUpdate:
		pol, err := ActivePolicy(p.ActivePolicyUpdate)
		if err != nil {
			return nil, err
		}
		return &model.ActivePolicyUpdate{Policy: pol}, nil
	case *felix.ToDataplane_ActivePolicyRemove:
		k, err := PolicyKeyOf(p.ActivePolicyRemove.GetId())
		if err != nil {
			return nil, err
		}
		return &model.ActivePolicyRemove{Key: k}, nil
	case *felix.ToDataplane_ActiveProfileUpdate:
		prof, err := ActiveProfile(p.ActiveProfileUpdate)
		if err != nil {
			return nil, err
		}
		return &model.ActiveProfileUpdate{Profile: prof}, nil
	case *felix.ToDataplane_ActiveProfileRemove:
		name := p.ActiveProfileRemove.GetId().GetName()
		if err := required("profile name", name); err != nil {
			return nil, err
		}
		return &model.ActiveProfileRemove{Name: name}, nil

	case *felix.ToDataplane_HostEndpointUpdate:
		ep, err := HostEndpoint(p.HostEndpointUpdate)
		if err != nil {
			return nil, err
		}
		return &model.HostEndpointUpdate{Endpoint: ep}, nil
	case *felix.ToDataplane_HostEndpointRemove:
		id := p.HostEndpointRemove.GetId().GetEndpointId()
		if err := required("host endpoint id", id); err != nil {
			return nil, err
		}
		return &model.HostEndpointRemove{ID: id}, nil
	}
	return translateNetwork(msg)
}

// translateNetwork covers routes and services.
func translateNetwork(msg *felix.ToDataplane) (model.Update, error) {
	switch p := msg.Payload.(type) {
	case *felix.ToDataplane_RouteUpdate:
		r, err := Route(p.RouteUpdate)
		if err != nil {
			return nil, err
		}
		return &model.RouteUpdate{Route: r}, nil
	case *felix.ToDataplane_RouteRemove:
		dst, err := parsePrefix(p.RouteRemove.GetDst())
		if err != nil {
			return nil, wrap("dst", err)
		}
		return &model.RouteRemove{Dst: dst}, nil

	case *felix.ToDataplane_ServiceUpdate:
		s, err := Service(p.ServiceUpdate)
		if err != nil {
			return nil, err
		}
		return &model.ServiceUpdate{Service: s}, nil
	case *felix.ToDataplane_ServiceRemove:
		k, err := ServiceKey(p.ServiceRemove.GetNamespace(), p.ServiceRemove.GetName())
		if err != nil {
			return nil, err
		}
		return &model.ServiceRemove{Key: k}, nil
	case *felix.ToDataplane_ServiceBackendsUpdate:
		u := p.ServiceBackendsUpdate
		bs, err := Backends(u)
		if err != nil {
			return nil, err
		}
		return &model.ServiceBackendsUpdate{Key: model.ServiceKey{Namespace: u.Namespace, Name: u.Name}, Backends: bs}, nil
	case *felix.ToDataplane_ServiceBackendsRemove:
		k, err := ServiceKey(p.ServiceBackendsRemove.GetNamespace(), p.ServiceBackendsRemove.GetName())
		if err != nil {
			return nil, err
		}
		return &model.ServiceBackendsRemove{Key: k}, nil
	}
	return translateInfra(msg)
}

func wrap(field string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", field, err)
}
