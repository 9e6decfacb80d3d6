package model

import "net/netip"

// Route is a parsed felix RouteUpdate.
type Route struct {
	Dst           netip.Prefix
	Types         uint32 // felix RouteType bitmap
	PoolType      uint8  // felix IPPoolType
	DstNodeName   string
	DstNodeIP     netip.Addr
	SameSubnet    bool
	NATOutgoing   bool
	LocalWorkload bool
	TunnelVXLAN   bool
	TunnelIPIP    bool
}

// ServiceKey names a Kubernetes service.
type ServiceKey struct {
	Namespace, Name string
}

// ServicePort is one frontend port of a service.
type ServicePort struct {
	Protocol uint8
	Port     uint16
	NodePort uint16
}

// Backend is one endpoint of a service.
type Backend struct {
	Addr     netip.Addr
	Port     uint16
	Protocol uint8
	PortName string
	Ready    bool
}

// Service is a service's frontends and backends.
type Service struct {
	Key                   ServiceKey
	Type                  string
	ClusterIPs            []netip.Addr
	LoadBalancerIP        netip.Addr
	ExternalIPs           []netip.Addr
	LoadBalancerIngressIP []netip.Addr
	Ports                 []ServicePort
	Backends              []Backend
}
