package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/servertest"
)

// TestInspectLists applies the basic example plus a route and a service
// and reads every list back through dpd.v1.Inspect.
func TestInspectLists(t *testing.T) {
	d := servertest.Start(t, "")
	c := dial(t, d.Socket)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := c.Dataplane().Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msgs := append(basicScenario(t),
		&felix.ToDataplane{Payload: &felix.ToDataplane_RouteUpdate{RouteUpdate: &felix.RouteUpdate{
			Dst: "10.66.0.0/26", DstNodeName: "node2", DstNodeIp: "192.168.0.2", Types: felix.RouteType_REMOTE_WORKLOAD}}},
		&felix.ToDataplane{Payload: &felix.ToDataplane_ServiceUpdate{ServiceUpdate: &felix.ServiceUpdate{
			Namespace: "demo", Name: "web", Type: "ClusterIP", ClusterIps: []string{"10.96.0.10"},
			Ports: []*felix.ServicePort{{Protocol: "TCP", Port: 80}}}}},
		&felix.ToDataplane{Payload: &felix.ToDataplane_ServiceBackendsUpdate{ServiceBackendsUpdate: &felix.ServiceBackendsUpdate{
			Namespace: "demo", Name: "web", Backends: []*felix.ServiceBackend{{Ip: "10.65.0.2", Port: 8080, Protocol: "TCP", Ready: true}}}}},
		&felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}})
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.GetDataplaneInSync() != nil {
			break
		}
	}
	ic := c.Inspect()

	pols, err := ic.ListPolicies(ctx, &dpdv1.ListPoliciesRequest{})
	if err != nil || len(pols.GetPolicies()) != 2 {
		t.Fatalf("ListPolicies = %v, %v", pols, err)
	}
	p := pols.GetPolicies()[0]
	if p.GetKind() != "policy" || p.GetEndpoints() != 3 || len(p.GetTiers()) != 1 || p.GetTiers()[0] != "security" || len(p.GetIpSets()) != 2 {
		t.Errorf("policy = %v", p)
	}

	sets, err := ic.ListIPSets(ctx, &dpdv1.ListIPSetsRequest{MaxMembers: 1})
	if err != nil || len(sets.GetIpSets()) != 2 {
		t.Fatalf("ListIPSets = %v, %v", sets, err)
	}
	for _, s := range sets.GetIpSets() {
		if s.GetMemberCount() != 2 || len(s.GetMembers()) != 1 || !s.GetTruncated() {
			t.Errorf("set = %v, want 2 members of which 1 shown", s)
		}
	}
	if _, err := ic.ListIPSets(ctx, &dpdv1.ListIPSetsRequest{Id: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown set: %v", err)
	}

	svcs, err := ic.ListServices(ctx, &dpdv1.ListServicesRequest{})
	if err != nil || len(svcs.GetServices()) != 1 || len(svcs.GetServices()[0].GetBackends()) != 1 ||
		svcs.GetServices()[0].GetPorts()[0].GetProtocol() != "tcp" {
		t.Errorf("ListServices = %v, %v", svcs, err)
	}
	routes, err := ic.ListRoutes(ctx, &dpdv1.ListRoutesRequest{})
	if err != nil || len(routes.GetRoutes()) != 1 || routes.GetRoutes()[0].GetDstNodeIp() != "192.168.0.2" ||
		routes.GetRoutes()[0].GetTypes()[0] != "remote-workload" {
		t.Errorf("ListRoutes = %v, %v", routes, err)
	}

	// The memory dataplane has no programs to trace or count.
	if _, err := ic.Trace(ctx, &dpdv1.TraceRequest{Endpoint: epA, Direction: "ingress"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Trace on memory = %v, want FailedPrecondition", err)
	}
	if _, err := ic.GetCounters(ctx, &dpdv1.GetCountersRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("GetCounters on memory = %v, want FailedPrecondition", err)
	}
}
