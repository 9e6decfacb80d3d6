package felixconv

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// errUnhandled marks a payload case this file does not know; a test walks
// every oneof case so that adding one to the proto without a rule here
// fails.
var errUnhandled = errors.New("no validation rule for this payload")

// Validate reports why msg cannot be applied, nil if it can. The error is
// an *Error. A message without a payload this build knows passes: upstream
// adds payload kinds over time, and the engine ignores what it does not
// know rather than dropping the controller.
func Validate(msg *felix.ToDataplane) error {
	if msg == nil {
		return &Error{Kind: KindUnknown, Reason: "nil message"}
	}
	ep, err := validatePayload(msg)
	if err == nil {
		return nil
	}
	return &Error{Seq: msg.SequenceNumber, Kind: PayloadKind(msg), Endpoint: ep, Reason: err.Error()}
}

// validatePayload checks msg's payload with the same functions the engine
// parses it with. It returns the workload endpoint concerned, when there is
// one with a valid ID.
func validatePayload(msg *felix.ToDataplane) (*model.WorkloadID, error) {
	if p := msg.Payload; p != nil && reflect.ValueOf(p).IsNil() {
		// Only Go callers can build this; the wire cannot.
		return nil, errors.New("payload wrapper is nil")
	}
	switch p := msg.Payload.(type) {
	case nil, *felix.ToDataplane_InSync, *felix.ToDataplane_ConfigUpdate, *felix.ToDataplane_Encapsulation:
		return nil, nil

	case *felix.ToDataplane_WorkloadEndpointUpdate:
		id, err := Endpoint(p.WorkloadEndpointUpdate.GetId())
		if err != nil {
			return nil, err
		}
		_, err = WorkloadEndpointUpdate(p.WorkloadEndpointUpdate)
		return &id, err
	case *felix.ToDataplane_WorkloadEndpointRemove:
		id, err := Endpoint(p.WorkloadEndpointRemove.GetId())
		if err != nil {
			return nil, err
		}
		return &id, nil
	}
	return nil, validateOther(msg)
}

func validateOther(msg *felix.ToDataplane) error {
	switch p := msg.Payload.(type) {
	case *felix.ToDataplane_IpsetUpdate:
		u := p.IpsetUpdate
		if err := required("ip set id", u.GetId()); err != nil {
			return err
		}
		_, err := IPSetMembers(u.GetType(), u.GetMembers())
		return err
	case *felix.ToDataplane_IpsetDeltaUpdate:
		u := p.IpsetDeltaUpdate
		if err := required("ip set id", u.GetId()); err != nil {
			return err
		}
		if err := anyMembers("added_members", u.GetAddedMembers()); err != nil {
			return err
		}
		return anyMembers("removed_members", u.GetRemovedMembers())
	case *felix.ToDataplane_IpsetRemove:
		return required("ip set id", p.IpsetRemove.GetId())

	case *felix.ToDataplane_ActiveProfileUpdate:
		_, err := ActiveProfile(p.ActiveProfileUpdate)
		return err
	case *felix.ToDataplane_ActiveProfileRemove:
		return required("profile name", p.ActiveProfileRemove.GetId().GetName())
	case *felix.ToDataplane_ActivePolicyUpdate:
		_, err := ActivePolicy(p.ActivePolicyUpdate)
		return err
	case *felix.ToDataplane_ActivePolicyRemove:
		_, err := PolicyKeyOf(p.ActivePolicyRemove.GetId())
		return err

	case *felix.ToDataplane_HostEndpointUpdate:
		return validateHostEndpoint(p.HostEndpointUpdate)
	case *felix.ToDataplane_HostEndpointRemove:
		return required("host endpoint id", p.HostEndpointRemove.GetId().GetEndpointId())

	case *felix.ToDataplane_RouteUpdate:
		_, err := Route(p.RouteUpdate)
		return err
	case *felix.ToDataplane_RouteRemove:
		_, err := parsePrefix(p.RouteRemove.GetDst())
		return wrap("dst", err)

	case *felix.ToDataplane_ServiceUpdate:
		_, err := Service(p.ServiceUpdate)
		return err
	case *felix.ToDataplane_ServiceRemove:
		_, err := ServiceKey(p.ServiceRemove.GetNamespace(), p.ServiceRemove.GetName())
		return err
	case *felix.ToDataplane_ServiceBackendsUpdate:
		_, err := Backends(p.ServiceBackendsUpdate)
		return err
	case *felix.ToDataplane_ServiceBackendsRemove:
		_, err := ServiceKey(p.ServiceBackendsRemove.GetNamespace(), p.ServiceBackendsRemove.GetName())
		return err
	}
	return validateInfra(msg)
}

// validateInfra covers the node-level payloads: hosts, pools, tunnels,
// namespaces and service accounts, BGP.
func validateInfra(msg *felix.ToDataplane) error {
	switch p := msg.Payload.(type) {
	case *felix.ToDataplane_HostMetadataUpdate:
		u := p.HostMetadataUpdate
		if err := required("hostname", u.GetHostname()); err != nil {
			return err
		}
		if err := hostAddr("ipv4_addr", u.GetIpv4Addr(), 4); err != nil {
			return err
		}
		return hostAddr("ipv6_addr", u.GetIpv6Addr(), 6)
	case *felix.ToDataplane_HostMetadataRemove:
		return required("hostname", p.HostMetadataRemove.GetHostname())

	case *felix.ToDataplane_IpamPoolUpdate:
		u := p.IpamPoolUpdate
		if err := required("pool id", u.GetId()); err != nil {
			return err
		}
		if u.GetPool() == nil {
			return errors.New("pool: missing")
		}
		_, err := parsePrefix(u.GetPool().GetCidr())
		return wrap("pool cidr", err)
	case *felix.ToDataplane_IpamPoolRemove:
		return required("pool id", p.IpamPoolRemove.GetId())

	case *felix.ToDataplane_ServiceAccountUpdate:
		return serviceAccountID(p.ServiceAccountUpdate.GetId())
	case *felix.ToDataplane_ServiceAccountRemove:
		return serviceAccountID(p.ServiceAccountRemove.GetId())
	case *felix.ToDataplane_NamespaceUpdate:
		return required("namespace name", p.NamespaceUpdate.GetId().GetName())
	case *felix.ToDataplane_NamespaceRemove:
		return required("namespace name", p.NamespaceRemove.GetId().GetName())

	case *felix.ToDataplane_VtepUpdate:
		return validateVTEP(p.VtepUpdate)
	case *felix.ToDataplane_VtepRemove:
		return required("node", p.VtepRemove.GetNode())

	case *felix.ToDataplane_WireguardEndpointUpdate:
		u := p.WireguardEndpointUpdate
		if err := required("hostname", u.GetHostname()); err != nil {
			return err
		}
		_, err := optAddr("interface_ipv4_addr", u.GetInterfaceIpv4Addr())
		return err
	case *felix.ToDataplane_WireguardEndpointRemove:
		return required("hostname", p.WireguardEndpointRemove.GetHostname())
	case *felix.ToDataplane_WireguardEndpointV6Update:
		u := p.WireguardEndpointV6Update
		if err := required("hostname", u.GetHostname()); err != nil {
			return err
		}
		_, err := optAddr("interface_ipv6_addr", u.GetInterfaceIpv6Addr())
		return err
	case *felix.ToDataplane_WireguardEndpointV6Remove:
		return required("hostname", p.WireguardEndpointV6Remove.GetHostname())

	case *felix.ToDataplane_GlobalBgpConfigUpdate:
		u := p.GlobalBgpConfigUpdate
		for _, l := range []struct {
			field string
			cidrs []string
		}{
			{"service_cluster_cidrs", u.GetServiceClusterCidrs()},
			{"service_external_cidrs", u.GetServiceExternalCidrs()},
			{"service_loadbalancer_cidrs", u.GetServiceLoadbalancerCidrs()},
		} {
			if _, err := prefixList(l.field, l.cidrs); err != nil {
				return err
			}
		}
		if _, err := optAddr("local_workload_peering_ip_v4", u.GetLocalWorkloadPeeringIpV4()); err != nil {
			return err
		}
		_, err := optAddr("local_workload_peering_ip_v6", u.GetLocalWorkloadPeeringIpV6())
		return err
	}
	return errUnhandled
}

func anyMembers(field string, ms []string) error {
	for i, m := range ms {
		if _, _, err := IPSetMemberAny(m); err != nil {
			return fmt.Errorf("%s[%d]: %w", field, i, err)
		}
	}
	return nil
}

// hostAddr checks an optional node address of the given family.
func hostAddr(field, s string, family int) error {
	if s == "" {
		return nil
	}
	a, err := parseHostAddr(s)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if (family == 4) != a.Is4() {
		return fmt.Errorf("%s: %s is not IPv%d", field, a, family)
	}
	return nil
}

func serviceAccountID(id *felix.ServiceAccountID) error {
	if err := required("service account namespace", id.GetNamespace()); err != nil {
		return err
	}
	return required("service account name", id.GetName())
}

func validateVTEP(u *felix.VXLANTunnelEndpointUpdate) error {
	if err := required("node", u.GetNode()); err != nil {
		return err
	}
	for _, m := range []struct{ field, mac string }{{"mac", u.GetMac()}, {"mac_v6", u.GetMacV6()}} {
		if m.mac == "" {
			continue
		}
		if _, err := parseMAC(m.mac); err != nil {
			return fmt.Errorf("%s: %w", m.field, err)
		}
	}
	for _, a := range []struct{ field, addr string }{
		{"ipv4_addr", u.GetIpv4Addr()}, {"parent_device_ip", u.GetParentDeviceIp()},
		{"ipv6_addr", u.GetIpv6Addr()}, {"parent_device_ipv6", u.GetParentDeviceIpv6()},
	} {
		if _, err := optAddr(a.field, a.addr); err != nil {
			return err
		}
	}
	return nil
}

func wrap(field string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", field, err)
}
