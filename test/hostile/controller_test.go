package hostile_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// dial connects to dpd's socket (closed at cleanup). opts come after the
// plaintext credentials.
func dial(t *testing.T, d *daemon, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient("unix://"+d.socket, opts...)
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// controller opens a Sync stream on conn; cancelled at cleanup.
func controller(t *testing.T, conn *grpc.ClientConn) dpdv1.Dataplane_SyncClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := dpdv1.NewDataplaneClient(conn).Sync(ctx)
	must(t, err)
	return st
}

// wepID is the id of workload endpoint name.
func wepID(name string) *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "ns/" + name, EndpointId: "eth0"}
}

// wepUpdate is an active endpoint name on interface iface with one address.
func wepUpdate(name, iface string, n int) *felix.ToDataplane {
	return testutil.ToDataplane(&felix.WorkloadEndpointUpdate{
		Id: wepID(name),
		Endpoint: &felix.WorkloadEndpoint{State: "active", Name: iface,
			Ipv4Nets: []string{fmt.Sprintf("10.%d.%d.%d/32", 64+n>>16&63, n>>8&255, n&255)}},
	})
}

func wepRemove(name string) *felix.ToDataplane {
	return testutil.ToDataplane(&felix.WorkloadEndpointRemove{Id: wepID(name)})
}

func inSync() *felix.ToDataplane { return testutil.ToDataplane(&felix.InSync{}) }

// epState is one endpoint as Inspect shows it.
type epState struct{ status, reason string }

// listEndpoints is every endpoint Inspect lists, by workload id.
func listEndpoints(t *testing.T, d *daemon) map[string]epState {
	t.Helper()
	conn := dial(t, d)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := dpdv1.NewInspectClient(conn).ListEndpoints(ctx, &dpdv1.ListEndpointsRequest{})
	if err != nil {
		t.Fatalf("ListEndpoints: %v", err)
	}
	m := make(map[string]epState, len(resp.GetEndpoints()))
	for _, ep := range resp.GetEndpoints() {
		m[ep.GetId().GetWorkloadId()] = epState{ep.GetStatus(), ep.GetReason()}
	}
	return m
}

// checkUp fails t unless every workload in names is listed and up.
func checkUp(t *testing.T, d *daemon, names ...string) {
	t.Helper()
	eps := listEndpoints(t, d)
	for _, n := range names {
		if s := eps["ns/"+n]; s.status != "up" {
			t.Errorf("endpoint %s applied before: %+v, want up", n, s)
		}
	}
}

// procStatus is a field of /proc/<pid>/status in bytes (VmRSS, VmHWM).
func (d *daemon) procStatus(t *testing.T, field string) int {
	t.Helper()
	v, err := d.statusField(field)
	must(t, err)
	return v
}

// statusField reads a field of /proc/<pid>/status in bytes; a process
// that has exited has none (a zombie's status has no memory lines).
func (d *daemon) statusField(field string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, d.cmd.Process.Pid)
}

// checkMemory logs VmRSS and VmHWM and fails t if either exceeds bound.
func (d *daemon) checkMemory(t *testing.T, bound int) {
	t.Helper()
	rss, hwm := d.procStatus(t, "VmRSS"), d.procStatus(t, "VmHWM")
	t.Logf("VmRSS %d MiB, VmHWM %d MiB (bound %d MiB)", rss>>20, hwm>>20, bound>>20)
	if rss > bound || hwm > bound {
		t.Errorf("VmRSS %d MiB / VmHWM %d MiB, bound %d MiB", rss>>20, hwm>>20, bound>>20)
	}
}

// checkLogLines fails t if the daemon has written more than bound lines.
func (d *daemon) checkLogLines(t *testing.T, bound int) {
	t.Helper()
	n := d.log.count()
	t.Logf("%d log lines (bound %d)", n, bound)
	if n > bound {
		t.Errorf("%d log lines, bound %d", n, bound)
	}
}
