package felixconv

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// translateInfra covers the node-level payloads: hosts, pools, tunnels,
// namespaces and service accounts, BGP. The ones dpd does not enforce yet
// are checked as thoroughly and reduced to what the engine stores: their
// kind and key.
func translateInfra(msg *felix.ToDataplane) (model.Update, error) {
	switch p := msg.Payload.(type) {
	case *felix.ToDataplane_HostMetadataUpdate:
		return hostMetadata(p.HostMetadataUpdate)
	case *felix.ToDataplane_HostMetadataRemove:
		name := p.HostMetadataRemove.GetHostname()
		if err := required("hostname", name); err != nil {
			return nil, err
		}
		return &model.HostMetadataRemove{Hostname: name}, nil

	case *felix.ToDataplane_VtepUpdate:
		v, err := vtep(p.VtepUpdate)
		if err != nil {
			return nil, err
		}
		return &model.VTEPUpdate{VTEP: v}, nil
	case *felix.ToDataplane_VtepRemove:
		node := p.VtepRemove.GetNode()
		if err := required("node", node); err != nil {
			return nil, err
		}
		return &model.VTEPRemove{Node: node}, nil

	case *felix.ToDataplane_IpamPoolUpdate:
		u := p.IpamPoolUpdate
		if err := required("pool id", u.GetId()); err != nil {
			return nil, err
		}
		if u.GetPool() == nil {
			return nil, errors.New("pool: missing")
		}
		if _, err := parsePrefix(u.GetPool().GetCidr()); err != nil {
			return nil, wrap("pool cidr", err)
		}
		return stored(model.StoredIPAMPool, u.GetId()), nil
	case *felix.ToDataplane_IpamPoolRemove:
		return storedRemove(model.StoredIPAMPool, "pool id", p.IpamPoolRemove.GetId())

	case *felix.ToDataplane_ServiceAccountUpdate:
		k, err := serviceAccountKey(p.ServiceAccountUpdate.GetId())
		if err != nil {
			return nil, err
		}
		return stored(model.StoredServiceAccount, k), nil
	case *felix.ToDataplane_ServiceAccountRemove:
		k, err := serviceAccountKey(p.ServiceAccountRemove.GetId())
		if err != nil {
			return nil, err
		}
		return &model.StoredRemove{Object: model.StoredServiceAccount, Key: k}, nil
	case *felix.ToDataplane_NamespaceUpdate:
		name := p.NamespaceUpdate.GetId().GetName()
		if err := required("namespace name", name); err != nil {
			return nil, err
		}
		u := &model.StoredUpdate{Object: model.StoredNamespace, Key: name}
		if l := p.NamespaceUpdate.GetLabels(); len(l) > 0 {
			u.Labels = maps.Clone(l)
		}
		return u, nil
	case *felix.ToDataplane_NamespaceRemove:
		return storedRemove(model.StoredNamespace, "namespace name", p.NamespaceRemove.GetId().GetName())
	}
	return translateTunnels(msg)
}

// translateTunnels covers WireGuard peers, BGP and encapsulation.
func translateTunnels(msg *felix.ToDataplane) (model.Update, error) {
	switch p := msg.Payload.(type) {
	case *felix.ToDataplane_WireguardEndpointUpdate:
		u := p.WireguardEndpointUpdate
		if err := required("hostname", u.GetHostname()); err != nil {
			return nil, err
		}
		if _, err := optAddr("interface_ipv4_addr", u.GetInterfaceIpv4Addr()); err != nil {
			return nil, err
		}
		return stored(model.StoredWireguard, u.GetHostname()), nil
	case *felix.ToDataplane_WireguardEndpointRemove:
		return storedRemove(model.StoredWireguard, "hostname", p.WireguardEndpointRemove.GetHostname())
	case *felix.ToDataplane_WireguardEndpointV6Update:
		u := p.WireguardEndpointV6Update
		if err := required("hostname", u.GetHostname()); err != nil {
			return nil, err
		}
		if _, err := optAddr("interface_ipv6_addr", u.GetInterfaceIpv6Addr()); err != nil {
			return nil, err
		}
		return stored(model.StoredWireguardV6, u.GetHostname()), nil
	case *felix.ToDataplane_WireguardEndpointV6Remove:
		return storedRemove(model.StoredWireguardV6, "hostname", p.WireguardEndpointV6Remove.GetHostname())

	case *felix.ToDataplane_GlobalBgpConfigUpdate:
		if err := globalBGP(p.GlobalBgpConfigUpdate); err != nil {
			return nil, err
		}
		return stored(model.StoredGlobalBGP, ""), nil
	case *felix.ToDataplane_Encapsulation:
		return stored(model.StoredEncapsulation, ""), nil
	}
	return nil, errUnhandled
}

func stored(kind model.StoredKind, key string) model.Update {
	return &model.StoredUpdate{Object: kind, Key: key}
}

// storedRemove removes the stored object key names in field.
func storedRemove(kind model.StoredKind, field, key string) (model.Update, error) {
	if err := required(field, key); err != nil {
		return nil, err
	}
	return &model.StoredRemove{Object: kind, Key: key}, nil
}

func hostMetadata(u *felix.HostMetadataUpdate) (model.Update, error) {
	h := model.HostMetadata{Hostname: u.GetHostname()}
	if err := required("hostname", h.Hostname); err != nil {
		return nil, err
	}
	var err error
	if h.IPv4Addr, err = hostAddr("ipv4_addr", u.GetIpv4Addr(), 4); err != nil {
		return nil, err
	}
	if h.IPv6Addr, err = hostAddr("ipv6_addr", u.GetIpv6Addr(), 6); err != nil {
		return nil, err
	}
	return &model.HostMetadataUpdate{Host: h}, nil
}

// hostAddr parses an optional node address of the given family; "" is the
// zero Addr.
func hostAddr(field, s string, family int) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := parseHostAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s: %w", field, err)
	}
	if (family == 4) != a.Is4() {
		return netip.Addr{}, fmt.Errorf("%s: %s is not IPv%d", field, a, family)
	}
	return a, nil
}

// serviceAccountKey checks a service account id and returns its key,
// "namespace/name".
func serviceAccountKey(id *felix.ServiceAccountID) (string, error) {
	if err := required("service account namespace", id.GetNamespace()); err != nil {
		return "", err
	}
	if err := required("service account name", id.GetName()); err != nil {
		return "", err
	}
	return id.GetNamespace() + "/" + id.GetName(), nil
}

// vtep parses a VXLANTunnelEndpointUpdate, both families.
func vtep(u *felix.VXLANTunnelEndpointUpdate) (model.VTEP, error) {
	v := model.VTEP{Node: u.GetNode()}
	if err := required("node", v.Node); err != nil {
		return model.VTEP{}, err
	}
	var err error
	if u.GetMac() != "" {
		if v.MAC, err = parseMAC(u.GetMac()); err != nil {
			return model.VTEP{}, fmt.Errorf("mac: %w", err)
		}
	}
	if u.GetMacV6() != "" {
		if v.MACV6, err = parseMAC(u.GetMacV6()); err != nil {
			return model.VTEP{}, fmt.Errorf("mac_v6: %w", err)
		}
	}
	if v.IPv4Addr, err = optAddr("ipv4_addr", u.GetIpv4Addr()); err != nil {
		return model.VTEP{}, err
	}
	if v.ParentDeviceIP, err = optAddr("parent_device_ip", u.GetParentDeviceIp()); err != nil {
		return model.VTEP{}, err
	}
	if v.IPv6Addr, err = optAddr("ipv6_addr", u.GetIpv6Addr()); err != nil {
		return model.VTEP{}, err
	}
	if v.ParentDeviceIPv6, err = optAddr("parent_device_ipv6", u.GetParentDeviceIpv6()); err != nil {
		return model.VTEP{}, err
	}
	return v, nil
}

func globalBGP(u *felix.GlobalBGPConfigUpdate) error {
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
