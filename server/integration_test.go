package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server"
	"github.com/dpd-dev/dpd/server/servertest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// TestSyncSnapshotInvalidAndInspect drives the real server, engine and
// memory kernel through the client library: snapshot, InSync, statuses;
// an invalid message that errors its endpoint without ending the stream;
// then Inspect.
func TestSyncSnapshotInvalidAndInspect(t *testing.T) {
	d := servertest.Start(t, "")
	c := dial(t, d.Socket)
	snap := basicScenario(t)
	sess := client.NewSession(c, func() []*felix.ToDataplane { return snap }, client.WithLogger(servertest.Logger()))
	t.Cleanup(func() { sess.Close() })

	var log statusLog
	expect(t, sess.Statuses(), &log, basicUp, 1)

	// A bad CIDR: the endpoint goes to "error", the stream stays up.
	const epBad = "k8s/demo/demo-bad/eth0"
	if err := sess.Send(wepUpdate("demo/demo-bad", "cali-demo-bad", "10.65.0.300/32")); err != nil {
		t.Fatal(err)
	}
	expect(t, sess.Statuses(), &log, with(basicUp, epBad, "error"), 1)
	if got := d.Metric(t, "dpd_invalid_messages_total"); got != 1 {
		t.Errorf("dpd_invalid_messages_total = %v, want 1", got)
	}
	ctx := context.Background()
	eventually(t, "Inspect shows the bad endpoint in error", func() error {
		ep, err := c.Inspect().GetEndpoint(ctx, &dpdv1.GetEndpointRequest{Id: epBad})
		if err != nil {
			return err
		}
		if ep.GetStatus() != "error" || ep.GetReason() == "" {
			return fmt.Errorf("bad endpoint = %q (reason %q), want error with a reason", ep.GetStatus(), ep.GetReason())
		}
		return nil
	})

	// The same stream takes the corrected update.
	if err := sess.Send(wepUpdate("demo/demo-bad", "cali-demo-bad", "10.65.0.4/32")); err != nil {
		t.Fatal(err)
	}
	expect(t, sess.Statuses(), &log, with(basicUp, epBad, "up"), 1)
	if err := sess.Err(); err != nil {
		t.Errorf("session ended: %v", err)
	}

	eventually(t, "Inspect agrees with the statuses", func() error {
		st, err := c.Inspect().GetStatus(ctx, &dpdv1.GetStatusRequest{})
		if err != nil {
			return err
		}
		if st.GetDataplane() != "memory" || st.GetPid() != int32(os.Getpid()) || st.GetVersion() != "test" || st.GetStarted() == nil {
			return fmt.Errorf("status identity = %q pid %d version %q started %v", st.GetDataplane(), st.GetPid(), st.GetVersion(), st.GetStarted())
		}
		if !st.GetSession().GetConnected() || !st.GetControllerInSync() || !st.GetDataplaneInSync() {
			return fmt.Errorf("status session = %v, in sync %v/%v", st.GetSession(), st.GetControllerInSync(), st.GetDataplaneInSync())
		}
		if n, up := st.GetCounts().GetEndpoints(), st.GetCounts().GetEndpointsUp(); n != 4 || up != 4 {
			return fmt.Errorf("counts: %d endpoints, %d up; want 4, 4", n, up)
		}
		list, err := c.Inspect().ListEndpoints(ctx, &dpdv1.ListEndpointsRequest{})
		if err != nil {
			return err
		}
		var ids []string
		for _, e := range list.GetEndpoints() {
			ids = append(ids, e.GetId().GetWorkloadId())
		}
		if want := []string{"demo/demo-a", "demo/demo-b", "demo/demo-bad", "demo/demo-c"}; !slices.Equal(ids, want) {
			return fmt.Errorf("ListEndpoints = %v, want %v", ids, want)
		}
		a, err := c.Inspect().GetEndpoint(ctx, &dpdv1.GetEndpointRequest{Id: epA})
		if err != nil {
			return err
		}
		if a.GetInterface() != "cali-demo-a" || a.GetStatus() != "up" || !slices.Equal(a.GetIpv4Nets(), []string{"10.65.0.1/32"}) {
			return fmt.Errorf("GetEndpoint(%s) = %v", epA, a)
		}
		return nil
	})
	_, err := c.Inspect().GetEndpoint(ctx, &dpdv1.GetEndpointRequest{Id: "k8s/demo/nope/eth0"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("GetEndpoint(missing) = %v, want NotFound", err)
	}
}

// TestSyncNewControllerTakesOver: a second Sync stream takes over and the
// first ends with codes.Aborted, which also ends the first client session
// (it must not fight back).
func TestSyncNewControllerTakesOver(t *testing.T) {
	d := servertest.Start(t, "")
	c := dial(t, d.Socket)
	snap := basicScenario(t)
	first := client.NewSession(c, func() []*felix.ToDataplane { return snap }, client.WithLogger(servertest.Logger()))
	t.Cleanup(func() { first.Close() })
	var log1 statusLog
	expect(t, first.Statuses(), &log1, basicUp, 1)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	second, err := c.Dataplane().Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range append(snap[:len(snap):len(snap)], &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}) {
		m.SequenceNumber = uint64(i + 1)
		if err := second.Send(m); err != nil {
			t.Fatal(err)
		}
	}

	hang := time.After(20 * time.Second) // hang guard, not a timing assertion
drain:
	for {
		select {
		case _, ok := <-first.Statuses():
			if !ok {
				break drain
			}
		case <-hang:
			t.Fatal("the superseded session did not end")
		}
	}
	if err := first.Err(); status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "superseded by a newer controller session") {
		t.Errorf("first session ended with %v, want Aborted: superseded", err)
	}
	var log2 statusLog
	for log2.inSync == 0 || !log2.has(basicUp) {
		m, err := second.Recv()
		if err != nil {
			t.Fatalf("second stream: %v", err)
		}
		log2.add(m)
	}
}

// TestServicesHealthAndReflection: reflection lists every service and
// health reports SERVING.
func TestServicesHealthAndReflection(t *testing.T) {
	d := servertest.Start(t, "")
	c := dial(t, d.Socket)
	ctx := context.Background()

	rs, err := reflectionpb.NewServerReflectionClient(c.Conn()).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"dpd.v1.Dataplane", "dpd.v1.Inspect", "felix.PolicySync", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}

	h, err := healthpb.NewHealthClient(c.Conn()).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health = %v, %v; want SERVING", h, err)
	}
	_, err = felix.NewPolicySyncClient(c.Conn()).Report(ctx, &felix.DataplaneStats{})
	// No workload identity on dpd's own socket: policy sync is per workload.
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("PolicySync.Report = %v, want FailedPrecondition", err)
	}
}

// TestSocketModeAndHTTP: the socket is 0600; /metrics holds the private
// registry's server, engine and runtime metrics; /livez and /readyz answer.
func TestSocketModeAndHTTP(t *testing.T) {
	d := servertest.Start(t, "")
	fi, err := os.Stat(d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want socket 0600", fi.Mode())
	}
	// One call so the gRPC metrics have a sample.
	if _, err := dial(t, d.Socket).Inspect().GetStatus(context.Background(), &dpdv1.GetStatusRequest{}); err != nil {
		t.Fatal(err)
	}

	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, m := range []string{"dpd_grpc_server_handled_total", "dpd_grpc_panics_total", "dpd_happy_endpoints", "go_goroutines", "process_open_fds"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if code, _ := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez = %d", code)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d while running", code)
	}
	d.Stop(t)
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d after stop, want 503", code)
	}
	if _, err := os.Stat(d.Socket); !os.IsNotExist(err) {
		t.Errorf("socket left behind after stop: %v", err)
	}
}

// TestDrainEndsControllerStream: stopping the daemon ends an open Sync
// stream with Unavailable instead of waiting out the drain timeout.
func TestDrainEndsControllerStream(t *testing.T) {
	d := servertest.Start(t, "")
	c := dial(t, d.Socket)
	stream, err := c.Dataplane().Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&felix.ToDataplane{SequenceNumber: 1, Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the daemon answers, so the session is live
		t.Fatal(err)
	}
	d.Stop(t)
	for {
		if _, err := stream.Recv(); err != nil {
			// A forced stop after the drain timeout would end it with a
			// transport error instead.
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
				t.Errorf("stream ended with %v, want Unavailable: dpd is shutting down", err)
			}
			break
		}
	}
}

// TestMaxRecvMsgSize: a message over --max-msg-size ends the stream with
// ResourceExhausted instead of being buffered.
func TestMaxRecvMsgSize(t *testing.T) {
	d := servertest.StartConfig(t, server.Config{MaxRecvMsgSize: 1024})
	stream, err := dial(t, d.Socket).Dataplane().Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	members := make([]string, 200)
	for i := range members {
		members[i] = fmt.Sprintf("10.1.%d.%d", i/256, i%256)
	}
	big := &felix.ToDataplane{SequenceNumber: 1, Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: "s:big", Members: members}}}
	if err := stream.Send(big); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("oversized message ended the stream with %v, want ResourceExhausted", err)
			}
			return
		}
	}
}

// TestStatusesCarryTheEndpoint: as Felix's own dataplane does, a workload
// status carries the endpoint the controller sent, also for an update that
// was rejected.
func TestStatusesCarryTheEndpoint(t *testing.T) {
	d := servertest.Start(t, "")
	c := dial(t, d.Socket)
	snap := basicScenario(t)
	sess := client.NewSession(c, func() []*felix.ToDataplane { return snap }, client.WithLogger(servertest.Logger()))
	t.Cleanup(func() { sess.Close() })
	if err := sess.Send(wepUpdate("demo/demo-bad", "cali-demo-bad", "10.65.0.300/32")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{epA: "cali-demo-a", "k8s/demo/demo-bad/eth0": "cali-demo-bad"}
	seen := map[string]string{}
	hang := time.NewTimer(20 * time.Second) // hang guard, not a timing assertion
	defer hang.Stop()
	for len(seen) < len(want) {
		select {
		case m := <-sess.Statuses():
			u := m.GetWorkloadEndpointStatusUpdate()
			id := u.GetId().GetOrchestratorId() + "/" + u.GetId().GetWorkloadId() + "/" + u.GetId().GetEndpointId()
			if _, ok := want[id]; ok {
				seen[id] = u.GetEndpoint().GetName()
			}
		case <-hang.C:
			t.Fatalf("statuses seen: %v", seen)
		}
	}
	if !maps.Equal(seen, want) {
		t.Fatalf("endpoints carried by the statuses: %v, want %v", seen, want)
	}
}
