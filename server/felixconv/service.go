package felixconv

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// ServiceKey checks and converts a service's namespace and name.
func ServiceKey(namespace, name string) (model.ServiceKey, error) {
	if err := required("service namespace", namespace); err != nil {
		return model.ServiceKey{}, err
	}
	if err := required("service name", name); err != nil {
		return model.ServiceKey{}, err
	}
	return model.ServiceKey{Namespace: namespace, Name: name}, nil
}

// L4Protocol parses a Kubernetes service protocol: TCP (also when empty,
// the Kubernetes default), UDP or SCTP, any case.
func L4Protocol(s string) (uint8, error) {
	switch strings.ToLower(s) {
	case "", "tcp":
		return model.ProtoTCP, nil
	case "udp":
		return model.ProtoUDP, nil
	case "sctp":
		return model.ProtoSCTP, nil
	}
	return 0, fmt.Errorf("unknown service protocol %q", s)
}

func port16(field string, p int32) (uint16, error) {
	if p < 0 || p > 65535 {
		return 0, fmt.Errorf("%s %d outside 0-65535", field, p)
	}
	return uint16(p), nil
}

// Service parses a ServiceUpdate (frontends only; Backends come from the
// dpd extension ServiceBackendsUpdate). Cluster IPs "" and "None" (a
// headless service) are skipped; every other address must parse.
func Service(s *felix.ServiceUpdate) (model.Service, error) {
	if s == nil {
		return model.Service{}, errors.New("nil service")
	}
	key, err := ServiceKey(s.Namespace, s.Name)
	if err != nil {
		return model.Service{}, err
	}
	out := model.Service{Key: key, Type: s.Type}
	for i, c := range s.ClusterIps {
		if c == "" || strings.EqualFold(c, "None") {
			continue
		}
		a, err := parseAddr(c)
		if err != nil {
			return model.Service{}, fmt.Errorf("cluster_ips[%d]: %w", i, err)
		}
		out.ClusterIPs = append(out.ClusterIPs, a)
	}
	if out.LoadBalancerIP, err = optAddr("loadbalancer_ip", s.LoadbalancerIp); err != nil {
		return model.Service{}, err
	}
	if out.ExternalIPs, err = addrList("external_ips", s.ExternalIps); err != nil {
		return model.Service{}, err
	}
	if out.LoadBalancerIngressIP, err = addrList("loadbalancer_ingress_ips", s.LoadbalancerIngressIps); err != nil {
		return model.Service{}, err
	}
	for i, p := range s.Ports {
		if p == nil {
			return model.Service{}, fmt.Errorf("ports[%d]: nil", i)
		}
		sp, err := servicePort(p)
		if err != nil {
			return model.Service{}, fmt.Errorf("ports[%d]: %w", i, err)
		}
		out.Ports = append(out.Ports, sp)
	}
	return out, nil
}

func servicePort(p *felix.ServicePort) (model.ServicePort, error) {
	proto, err := L4Protocol(p.Protocol)
	if err != nil {
		return model.ServicePort{}, err
	}
	port, err := port16("port", p.Port)
	if err != nil {
		return model.ServicePort{}, err
	}
	nodePort, err := port16("node_port", p.NodePort)
	if err != nil {
		return model.ServicePort{}, err
	}
	return model.ServicePort{Protocol: proto, Port: port, NodePort: nodePort}, nil
}

// Backends parses a ServiceBackendsUpdate's backend list (the service key
// is checked too, so a message that parses is complete).
func Backends(b *felix.ServiceBackendsUpdate) ([]model.Backend, error) {
	if b == nil {
		return nil, errors.New("nil backends update")
	}
	if _, err := ServiceKey(b.Namespace, b.Name); err != nil {
		return nil, err
	}
	if len(b.Backends) == 0 {
		return nil, nil
	}
	out := make([]model.Backend, 0, len(b.Backends))
	for i, be := range b.Backends {
		if be == nil {
			return nil, fmt.Errorf("backends[%d]: nil", i)
		}
		mb, err := backend(be)
		if err != nil {
			return nil, fmt.Errorf("backends[%d]: %w", i, err)
		}
		out = append(out, mb)
	}
	return out, nil
}

func backend(be *felix.ServiceBackend) (model.Backend, error) {
	addr, err := parseAddr(be.Ip)
	if err != nil {
		return model.Backend{}, fmt.Errorf("ip: %w", err)
	}
	port, err := port16("port", be.Port)
	if err != nil {
		return model.Backend{}, err
	}
	proto, err := L4Protocol(be.Protocol)
	if err != nil {
		return model.Backend{}, err
	}
	return model.Backend{Addr: addr, Port: port, Protocol: proto, PortName: be.PortName, Ready: be.Ready}, nil
}
