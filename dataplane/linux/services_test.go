package linux

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestServiceNAT drives the composed kernel with a service whose backends
// are real workloads: connections spread, follow backend removal, work in
// hairpin, and the maps are cleaned up with the service.
func TestServiceNAT(t *testing.T) {
	k := newTestKernel(t)
	ws := []*testutil.Workload{
		testutil.NewWorkload(t, "cali", "10.68.0.1"), // client, and hairpin backend later
		testutil.NewWorkload(t, "cali", "10.68.0.2"),
		testutil.NewWorkload(t, "cali", "10.68.0.3"),
	}
	testutil.WaitFor(t, 5*time.Second, "monitor sees the interfaces", func() bool {
		for _, w := range ws {
			if _, ok := k.mon.Ifindex(w.HostIface); !ok {
				return false
			}
		}
		return true
	})
	for i, w := range ws {
		if err := k.ApplyEndpoint(endpointFor(w, 10+i, allowAll(), allowAll())); err != nil {
			t.Fatal(err)
		}
	}
	testutil.ServeName(t, ws[1].NS, 8080, "b")
	testutil.ServeName(t, ws[2].NS, 8080, "c")
	testutil.ServeName(t, ws[0].NS, 8080, "self")

	backend := func(w *testutil.Workload) model.Backend {
		return model.Backend{Addr: netip.MustParseAddr(w.IP), Port: 8080, Protocol: model.ProtoTCP, Ready: true}
	}
	udp := func(b model.Backend) model.Backend { b.Protocol = model.ProtoUDP; return b }
	svc := &model.Service{
		Key:        model.ServiceKey{Namespace: "ns", Name: "web"},
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.68.10")},
		Ports:      []model.ServicePort{{Protocol: model.ProtoTCP, Port: 80}, {Protocol: model.ProtoUDP, Port: 53}},
		Backends: []model.Backend{backend(ws[1]), backend(ws[2]), udp(backend(ws[1])),
			{Addr: netip.MustParseAddr("10.68.0.9"), Port: 8080, Protocol: model.ProtoTCP}}, // not ready
	}
	if err := k.ApplyService(svc); err != nil {
		t.Fatal(err)
	}
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for range 40 {
		name, err := testutil.AskName(ws[0].NS, "tcp4", "10.96.68.10:80")
		if err != nil {
			t.Fatalf("connect to the service: %v", err)
		}
		seen[name]++
	}
	if seen["b"] == 0 || seen["c"] == 0 || len(seen) != 2 {
		t.Fatalf("40 connections reached %v, want b and c", seen)
	}
	if name, err := testutil.AskName(ws[0].NS, "udp4", "10.96.68.10:53"); err != nil || name != "b" {
		t.Fatalf("udp service: %q %v", name, err)
	}

	// c leaves: every new connection goes to b.
	svc.Backends = []model.Backend{backend(ws[1]), udp(backend(ws[1]))}
	if err := k.ApplyService(svc); err != nil {
		t.Fatal(err)
	}
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if name, err := testutil.AskName(ws[0].NS, "tcp4", "10.96.68.10:80"); err != nil || name != "b" {
			t.Fatalf("after removing c: %q %v", name, err)
		}
	}

	// Hairpin: the client is the only backend.
	svc.Backends = []model.Backend{backend(ws[0])}
	if err := k.ApplyService(svc); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if name, err := testutil.AskName(ws[0].NS, "tcp4", "10.96.68.10:80"); err != nil || name != "self" {
			t.Fatalf("hairpin: %q %v", name, err)
		}
	}

	if err := k.RemoveService(svc); err != nil {
		t.Fatal(err)
	}
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	fes, err := k.datapath().NATFrontends()
	if err != nil || len(fes) != 0 {
		t.Fatalf("frontends left after removal: %+v %v", fes, err)
	}
	if flows, _ := k.datapath().NATFlows(); len(flows) != 0 {
		t.Fatalf("NAT flows left after removal: %d", len(flows))
	}
	if _, err := testutil.AskName(ws[0].NS, "tcp4", "10.96.68.10:80"); err == nil {
		t.Fatal("removed service still answers")
	}
}

// TestRestartAdoptsAndCollects: a restarted kernel keeps the service port
// ids of the services re-sent (so live connections keep their backends),
// and its first EndApply removes what was not re-sent.
func TestServiceRestartAdoptsAndCollects(t *testing.T) {
	k := newTestKernel(t)
	pin := k.opts.PinDir
	svc := func(name, ip string) *model.Service {
		return &model.Service{
			Key:        model.ServiceKey{Namespace: "ns", Name: name},
			ClusterIPs: []netip.Addr{netip.MustParseAddr(ip)},
			Ports:      []model.ServicePort{{Protocol: model.ProtoTCP, Port: 80}},
			Backends: []model.Backend{
				{Addr: netip.MustParseAddr("10.68.1.1"), Port: 8080, Protocol: model.ProtoTCP, Ready: true},
				{Addr: netip.MustParseAddr("10.68.1.2"), Port: 8080, Protocol: model.ProtoTCP, Ready: true},
			},
		}
	}
	keep, drop := svc("keep", "10.96.68.20"), svc("drop", "10.96.68.21")
	local := &model.Route{Dst: netip.MustParsePrefix("10.68.0.0/26"), Types: 4, PoolType: poolNoEncap, LocalWorkload: true}
	stale := &model.Route{Dst: netip.MustParsePrefix("10.68.9.0/26"), Types: 4, PoolType: poolNoEncap, LocalWorkload: true}
	for _, s := range []*model.Service{keep, drop} {
		if err := k.ApplyService(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*model.Route{local, stale} {
		if err := k.ApplyRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	idOf := func(k *Kernel, ip string) uint32 {
		fes, err := k.datapath().NATFrontends()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fes {
			if f.Frontend.Addr.String() == ip {
				return f.ID
			}
		}
		return 0
	}
	keepID := idOf(k, "10.96.68.20")
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}

	k2, err := New(Options{PinDir: pin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k2.Close() })
	// The restarted controller re-sends only keep (with one backend less)
	// and the local route.
	keep.Backends = keep.Backends[:1]
	if err := k2.ApplyService(keep); err != nil {
		t.Fatal(err)
	}
	if err := k2.ApplyRoute(local); err != nil {
		t.Fatal(err)
	}
	if got := idOf(k2, "10.96.68.20"); got != keepID {
		t.Fatalf("re-sent service got id %d, had %d", got, keepID)
	}
	if err := k2.EndApply(); err != nil {
		t.Fatal(err)
	}
	if id := idOf(k2, "10.96.68.21"); id != 0 {
		t.Fatalf("service not re-sent still has frontend (id %d)", id)
	}
	if bes, err := k2.datapath().NATBackendsOf(keepID); err != nil || len(bes) != 1 {
		t.Fatalf("backends of re-sent service: %v %v", bes, err)
	}
	routes, err := k2.datapath().Routes()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := routes[stale.Dst]; ok || len(routes) != 1 {
		t.Fatalf("BPF routes after restart GC: %v", routes)
	}
	// A fresh id is never one still in use.
	other := svc("other", "10.96.68.22")
	if err := k2.ApplyService(other); err != nil {
		t.Fatal(err)
	}
	if id := idOf(k2, "10.96.68.22"); id == 0 || id == keepID {
		t.Fatalf("new service got id %d (kept id %d)", id, keepID)
	}
}
