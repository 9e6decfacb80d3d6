package server

import (
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

func wireWEP(wl, iface string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
		Id:       &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: wl, EndpointId: "eth0"},
		Endpoint: &felix.WorkloadEndpoint{State: "active", Name: iface},
	}}}
}

func wireWEPRemove(wl string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{
		Id: &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: wl, EndpointId: "eth0"},
	}}}
}

// TestFelixStatusEncoding: every engine status becomes the FromDataplane
// message dpd has always sent, numbered 1..n, a workload status echoing
// the endpoint as the controller last sent it.
func TestFelixStatusEncoding(t *testing.T) {
	a := model.WorkloadID{Orchestrator: "k8s", Workload: "a", Endpoint: "eth0"}
	b := model.WorkloadID{Orchestrator: "k8s", Workload: "b", Endpoint: "eth0"}
	fa := &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "a", EndpointId: "eth0"}
	fb := &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "b", EndpointId: "eth0"}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("x", 3600))

	f := newFelixStatuses()
	f.observe(wireWEP("a", "calia"))
	cases := []struct {
		in   engine.Status
		want *felix.FromDataplane
	}{
		{&engine.Heartbeat{Time: at, Uptime: 1500 * time.Millisecond}, &felix.FromDataplane{Payload: &felix.FromDataplane_ProcessStatusUpdate{
			ProcessStatusUpdate: &felix.ProcessStatusUpdate{IsoTimestamp: "2026-12-01T09:00:00Z", Uptime: 1.5}}}},
		{&engine.WorkloadStatus{ID: a, Status: "up"}, &felix.FromDataplane{Payload: &felix.FromDataplane_WorkloadEndpointStatusUpdate{
			WorkloadEndpointStatusUpdate: &felix.WorkloadEndpointStatusUpdate{Id: fa, Status: &felix.EndpointStatus{Status: "up"},
				Endpoint: &felix.WorkloadEndpoint{State: "active", Name: "calia"}}}}},
		{&engine.WorkloadStatus{ID: b, Status: "error"}, &felix.FromDataplane{Payload: &felix.FromDataplane_WorkloadEndpointStatusUpdate{
			WorkloadEndpointStatusUpdate: &felix.WorkloadEndpointStatusUpdate{Id: fb, Status: &felix.EndpointStatus{Status: "error"}}}}},
		{&engine.WorkloadRemoved{ID: a}, &felix.FromDataplane{Payload: &felix.FromDataplane_WorkloadEndpointStatusRemove{
			WorkloadEndpointStatusRemove: &felix.WorkloadEndpointStatusRemove{Id: fa}}}},
		{&engine.HostStatus{ID: "h", Status: "down"}, &felix.FromDataplane{Payload: &felix.FromDataplane_HostEndpointStatusUpdate{
			HostEndpointStatusUpdate: &felix.HostEndpointStatusUpdate{Id: &felix.HostEndpointID{EndpointId: "h"}, Status: &felix.EndpointStatus{Status: "down"}}}}},
		{&engine.HostRemoved{ID: "h"}, &felix.FromDataplane{Payload: &felix.FromDataplane_HostEndpointStatusRemove{
			HostEndpointStatusRemove: &felix.HostEndpointStatusRemove{Id: &felix.HostEndpointID{EndpointId: "h"}}}}},
		{&engine.DataplaneInSync{}, &felix.FromDataplane{Payload: &felix.FromDataplane_DataplaneInSync{DataplaneInSync: &felix.DataplaneInSync{}}}},
		{&engine.HappyReport{Full: true, Added: []model.WorkloadID{a, b}, Happy: 2, Dirty: 1, Errored: 3}, &felix.FromDataplane{Payload: &felix.FromDataplane_HappyEndpoints{
			HappyEndpoints: &felix.HappyEndpointsReport{Full: true, Added: []*felix.WorkloadEndpointID{fa, fb}, Happy: 2, Dirty: 1, Errored: 3}}}},
		{&engine.HappyReport{Removed: []model.WorkloadID{b}, Happy: 1}, &felix.FromDataplane{Payload: &felix.FromDataplane_HappyEndpoints{
			HappyEndpoints: &felix.HappyEndpointsReport{Removed: []*felix.WorkloadEndpointID{fb}, Happy: 1}}}},
	}
	for i, c := range cases {
		got, err := f.encode(c.in)
		if err != nil {
			t.Fatalf("encode %T: %v", c.in, err)
		}
		c.want.SequenceNumber = uint64(i + 1)
		if !proto.Equal(got, c.want) {
			t.Errorf("encode %T:\n got %s\nwant %s", c.in, prototext.Format(got), prototext.Format(c.want))
		}
	}
}

// TestFelixStatusEcho: the echoed endpoint is the latest sent; a removal
// reported after the endpoint was sent again keeps the new one.
func TestFelixStatusEcho(t *testing.T) {
	a := model.WorkloadID{Orchestrator: "k8s", Workload: "a", Endpoint: "eth0"}
	echo := func(f *felixStatuses) string {
		m, err := f.encode(&engine.WorkloadStatus{ID: a, Status: "up"})
		if err != nil {
			t.Fatal(err)
		}
		return m.GetWorkloadEndpointStatusUpdate().GetEndpoint().GetName()
	}
	f := newFelixStatuses()
	f.observe(wireWEP("a", "cali1"))
	f.observe(wireWEP("a", "cali2"))
	if got := echo(f); got != "cali2" {
		t.Fatalf("echo %q, want the latest, cali2", got)
	}
	// Removed, then sent again before the engine reported the removal.
	f.observe(wireWEPRemove("a"))
	if got := echo(f); got != "cali2" {
		t.Fatalf("echo %q after a remove not yet reported, want cali2", got)
	}
	f.observe(wireWEP("a", "cali3"))
	if _, err := f.encode(&engine.WorkloadRemoved{ID: a}); err != nil {
		t.Fatal(err)
	}
	if got := echo(f); got != "cali3" {
		t.Fatalf("echo %q after re-add, want cali3", got)
	}
	// Removed for good: forgotten once reported.
	f.observe(wireWEPRemove("a"))
	if _, err := f.encode(&engine.WorkloadRemoved{ID: a}); err != nil {
		t.Fatal(err)
	}
	if len(f.echo) != 0 {
		t.Fatalf("echo keeps %d endpoints after their removal was reported", len(f.echo))
	}
}
