package felixconv

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

func TestRoute(t *testing.T) {
	in := &felix.RouteUpdate{
		Types:       felix.RouteType_REMOTE_WORKLOAD | felix.RouteType_REMOTE_TUNNEL,
		IpPoolType:  felix.IPPoolType_VXLAN,
		Dst:         "10.65.1.7/26",
		DstNodeName: "node-b",
		DstNodeIp:   "192.168.0.2",
		SameSubnet:  true,
		NatOutgoing: true,
		TunnelType:  &felix.TunnelType{Vxlan: true},
	}
	got, err := Route(in)
	if err != nil {
		t.Fatal(err)
	}
	want := model.Route{
		Dst: netip.MustParsePrefix("10.65.1.0/26"), Types: 17, PoolType: 2, DstNodeName: "node-b",
		DstNodeIP: netip.MustParseAddr("192.168.0.2"), SameSubnet: true, NATOutgoing: true, TunnelVXLAN: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for name, tc := range map[string]struct {
		r   *felix.RouteUpdate
		err string
	}{
		"nil":            {nil, "nil route"},
		"no dst":         {&felix.RouteUpdate{}, "dst: empty"},
		"bad dst":        {&felix.RouteUpdate{Dst: "10.0.0.0/99"}, "dst"},
		"bare addr dst":  {&felix.RouteUpdate{Dst: "10.0.0.1", TunnelType: &felix.TunnelType{Ipip: true}}, ""},
		"bad node ip":    {&felix.RouteUpdate{Dst: "10.0.0.0/8", DstNodeIp: "node-b"}, "dst_node_ip"},
		"negative types": {&felix.RouteUpdate{Dst: "10.0.0.0/8", Types: -1}, "negative"},
		"unknown pool":   {&felix.RouteUpdate{Dst: "10.0.0.0/8", IpPoolType: 7}, "ip_pool_type"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Route(tc.r)
			checkErr(t, err, tc.err)
		})
	}
}

func TestService(t *testing.T) {
	in := &felix.ServiceUpdate{
		Name: "web", Namespace: "prod", Type: "LoadBalancer",
		ClusterIps:             []string{"10.96.0.10", "fd00:96::a"},
		LoadbalancerIp:         "203.0.113.10",
		ExternalIps:            []string{"198.51.100.7"},
		LoadbalancerIngressIps: []string{"203.0.113.11"},
		Ports:                  []*felix.ServicePort{{Protocol: "TCP", Port: 80, NodePort: 30080}, {Protocol: "udp", Port: 53}, {Port: 443}},
	}
	got, err := Service(in)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	want := model.Service{
		Key: model.ServiceKey{Namespace: "prod", Name: "web"}, Type: "LoadBalancer",
		ClusterIPs:            []netip.Addr{a("10.96.0.10"), a("fd00:96::a")},
		LoadBalancerIP:        a("203.0.113.10"),
		ExternalIPs:           []netip.Addr{a("198.51.100.7")},
		LoadBalancerIngressIP: []netip.Addr{a("203.0.113.11")},
		Ports:                 []model.ServicePort{{Protocol: 6, Port: 80, NodePort: 30080}, {Protocol: 17, Port: 53}, {Protocol: 6, Port: 443}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	headless, err := Service(&felix.ServiceUpdate{Name: "h", Namespace: "ns", ClusterIps: []string{"None"}})
	if err != nil || headless.ClusterIPs != nil {
		t.Errorf("headless service: %+v, %v", headless, err)
	}
	for name, tc := range map[string]struct {
		s   *felix.ServiceUpdate
		err string
	}{
		"nil":          {nil, "nil service"},
		"no name":      {&felix.ServiceUpdate{Namespace: "ns"}, "service name"},
		"no namespace": {&felix.ServiceUpdate{Name: "n"}, "service namespace"},
		"bad cluster":  {&felix.ServiceUpdate{Name: "n", Namespace: "ns", ClusterIps: []string{"10.0.0.x"}}, "cluster_ips[0]"},
		"bad lb":       {&felix.ServiceUpdate{Name: "n", Namespace: "ns", LoadbalancerIp: "lb"}, "loadbalancer_ip"},
		"bad external": {&felix.ServiceUpdate{Name: "n", Namespace: "ns", ExternalIps: []string{""}}, "external_ips[0]"},
		"bad ingress":  {&felix.ServiceUpdate{Name: "n", Namespace: "ns", LoadbalancerIngressIps: []string{"1.2.3"}}, "loadbalancer_ingress_ips[0]"},
		"bad proto":    {&felix.ServiceUpdate{Name: "n", Namespace: "ns", Ports: []*felix.ServicePort{{Protocol: "ICMP", Port: 1}}}, "ports[0]"},
		"port big":     {&felix.ServiceUpdate{Name: "n", Namespace: "ns", Ports: []*felix.ServicePort{{Port: 70000}}}, "port 70000"},
		"nodeport neg": {&felix.ServiceUpdate{Name: "n", Namespace: "ns", Ports: []*felix.ServicePort{{Port: 1, NodePort: -2}}}, "node_port"},
		"nil port":     {&felix.ServiceUpdate{Name: "n", Namespace: "ns", Ports: []*felix.ServicePort{nil}}, "ports[0]: nil"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Service(tc.s)
			checkErr(t, err, tc.err)
		})
	}
}

func TestBackends(t *testing.T) {
	got, err := Backends(&felix.ServiceBackendsUpdate{Namespace: "prod", Name: "web", Backends: []*felix.ServiceBackend{
		{Ip: "10.65.0.2", Port: 8080, Protocol: "TCP", PortName: "http", Ready: true},
		{Ip: "fd00::2", Port: 53, Protocol: "udp"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []model.Backend{
		{Addr: netip.MustParseAddr("10.65.0.2"), Port: 8080, Protocol: 6, PortName: "http", Ready: true},
		{Addr: netip.MustParseAddr("fd00::2"), Port: 53, Protocol: 17},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for name, tc := range map[string]struct {
		b   *felix.ServiceBackendsUpdate
		err string
	}{
		"nil":      {nil, "nil backends"},
		"no name":  {&felix.ServiceBackendsUpdate{Namespace: "ns"}, "service name"},
		"bad ip":   {&felix.ServiceBackendsUpdate{Namespace: "ns", Name: "n", Backends: []*felix.ServiceBackend{{Ip: "x"}}}, "backends[0]: ip"},
		"bad port": {&felix.ServiceBackendsUpdate{Namespace: "ns", Name: "n", Backends: []*felix.ServiceBackend{{Ip: "10.0.0.1", Port: 65536}}}, "port 65536"},
		"bad prot": {&felix.ServiceBackendsUpdate{Namespace: "ns", Name: "n", Backends: []*felix.ServiceBackend{{Ip: "10.0.0.1", Protocol: "gre"}}}, "protocol"},
		"nil be":   {&felix.ServiceBackendsUpdate{Namespace: "ns", Name: "n", Backends: []*felix.ServiceBackend{nil}}, "backends[0]: nil"},
		"empty ok": {&felix.ServiceBackendsUpdate{Namespace: "ns", Name: "n"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Backends(tc.b)
			checkErr(t, err, tc.err)
		})
	}
}
