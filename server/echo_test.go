package server

import (
	"errors"
	"testing"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// TestEndpointEcho: a status carries the endpoint last sent for its id,
// accepted or rejected, and nothing once the endpoint was removed.
func TestEndpointEcho(t *testing.T) {
	fid := &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "ns/a", EndpointId: "eth0"}
	update := func(iface string) *felix.ToDataplane {
		return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
			Id: fid, Endpoint: &felix.WorkloadEndpoint{Name: iface, Ipv4Nets: []string{"10.65.0.1/32"}}}}}
	}
	remove := &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{Id: fid}}}
	status := func() *felix.WorkloadEndpointStatusUpdate {
		return &felix.WorkloadEndpointStatusUpdate{Id: fid, Status: &felix.EndpointStatus{Status: "up"}}
	}
	echoed := func(e *endpointEcho) string {
		u := status()
		e.fill(&felix.FromDataplane{Payload: &felix.FromDataplane_WorkloadEndpointStatusUpdate{WorkloadEndpointStatusUpdate: u}})
		if u.Endpoint == nil {
			return "<none>"
		}
		return u.Endpoint.Name
	}
	var e endpointEcho
	if got := echoed(&e); got != "<none>" {
		t.Fatalf("before any update: %q", got)
	}
	for _, step := range []struct {
		msg  *felix.ToDataplane
		want string
	}{
		{update("calia"), "calia"},
		{update("calib"), "calib"},
		{update("bad/name"), "bad/name"}, // rejected: its error status shows what was sent
		{remove, "<none>"},
		{update("calic"), "calic"},
	} {
		u, err := felixconv.Translate(step.msg)
		if err != nil {
			var fe *felixconv.Error
			if !errors.As(err, &fe) || fe.Endpoint == nil {
				t.Fatalf("%v does not name the endpoint", err)
			}
			e.recordRejected(*fe.Endpoint, step.msg)
		} else {
			e.record(u, step.msg)
		}
		if got := echoed(&e); got != step.want {
			t.Fatalf("after %s: echoed %q, want %q", felixconv.PayloadKind(step.msg), got, step.want)
		}
	}
	// A status that already carries an endpoint keeps it.
	u := status()
	u.Endpoint = &felix.WorkloadEndpoint{Name: "mine"}
	e.fill(&felix.FromDataplane{Payload: &felix.FromDataplane_WorkloadEndpointStatusUpdate{WorkloadEndpointStatusUpdate: u}})
	if u.Endpoint.Name != "mine" {
		t.Fatalf("fill replaced the endpoint: %v", u.Endpoint)
	}
}
