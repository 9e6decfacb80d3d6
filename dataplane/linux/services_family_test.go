package linux

import (
	"net/netip"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

// TestDesiredPortsByFamily: a dual-stack service is one service port per
// family, each with only its family's frontends and backends (IPv4-mapped
// backends count as IPv4), so no frontend can pick a backend of the other
// family.
func TestDesiredPortsByFamily(t *testing.T) {
	a := netip.MustParseAddr
	be := func(s string) model.Backend {
		return model.Backend{Addr: a(s), Port: 8080, Protocol: model.ProtoTCP, Ready: true}
	}
	svc := &model.Service{
		Key:         model.ServiceKey{Namespace: "ns", Name: "dual"},
		ClusterIPs:  []netip.Addr{a("10.96.0.10"), a("fd00:96::10")},
		ExternalIPs: []netip.Addr{a("2001:db8::80")},
		Ports:       []model.ServicePort{{Protocol: model.ProtoTCP, Port: 80}},
		Backends:    []model.Backend{be("10.65.0.2"), be("fd00:65::2"), be("::ffff:10.65.0.3"), be("fd00:65::3")},
	}
	got := desiredPorts(svc)
	if len(got) != 2 {
		t.Fatalf("%d service ports, want one per family: %+v", len(got), got)
	}
	v4 := got[svcPortKey{proto: model.ProtoTCP, port: 80}]
	v6 := got[svcPortKey{proto: model.ProtoTCP, port: 80, v6: true}]
	fe := func(s string) tcbpf.NATFrontend {
		return tcbpf.NATFrontend{Addr: a(s), Port: 80, Proto: model.ProtoTCP}
	}
	nb := func(s string) tcbpf.NATBackend { return tcbpf.NATBackend{Addr: a(s), Port: 8080} }
	if len(v4.fes) != 1 || v4.fes[0] != fe("10.96.0.10") ||
		len(v4.bes) != 2 || v4.bes[0] != nb("10.65.0.2") || v4.bes[1] != nb("10.65.0.3") {
		t.Fatalf("IPv4 port %+v", v4)
	}
	if len(v6.fes) != 2 || v6.fes[0] != fe("2001:db8::80") || v6.fes[1] != fe("fd00:96::10") ||
		len(v6.bes) != 2 || v6.bes[0] != nb("fd00:65::2") || v6.bes[1] != nb("fd00:65::3") {
		t.Fatalf("IPv6 port %+v", v6)
	}
	// An IPv6-only service has no IPv4 port.
	svc.ClusterIPs, svc.ExternalIPs = []netip.Addr{a("fd00:96::10")}, nil
	if got := desiredPorts(svc); len(got) != 1 || len(got[svcPortKey{proto: model.ProtoTCP, port: 80, v6: true}].fes) != 1 {
		t.Fatalf("IPv6-only service: %+v", got)
	}
}
