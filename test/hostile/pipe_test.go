package hostile_test

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixpipe"
)

// emptyFrames is how many zero-length frames the flood sends, and
// logBound the most log lines the whole run may write.
const (
	emptyFrames = 100000
	logBound    = 100
)

// TestZeroLengthPipeFrames: in pipe mode, 100,000 zero-length frames are
// each counted as invalid, cost under 100 log lines in all, leave the
// endpoint applied before intact, and the daemon keeps answering.
func TestZeroLengthPipeFrames(t *testing.T) {
	d, inW, outR := startPipeDaemon(t)
	go func() { // statuses: read and dropped
		r := felixpipe.NewReader(outR, 0)
		for r.Read(&felix.FromDataplane{}) == nil {
		}
	}()

	w := felixpipe.NewWriter(inW)
	wep := &felix.WorkloadEndpointUpdate{
		Id:       &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "ns/web", EndpointId: "eth0"},
		Endpoint: &felix.WorkloadEndpoint{State: "active", Name: "caliweb", Ipv4Nets: []string{"10.65.0.2/32"}},
	}
	for _, m := range []*felix.ToDataplane{testutil.ToDataplane(wep), testutil.ToDataplane(&felix.InSync{})} {
		must(t, w.Write(m))
	}
	testutil.WaitFor(t, 30*time.Second, "the endpoint applied", func() bool { return endpoints(t, d) == 1 })
	linesBefore := d.log.count()

	flood := make([]byte, 8*emptyFrames) // each frame: a zero length, no bytes
	binary.LittleEndian.PutUint64(flood, 0)
	if _, err := inW.Write(flood); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 60*time.Second, "every empty frame counted invalid", func() bool {
		return d.metric("dpd_invalid_messages_total") == emptyFrames
	})
	d.answers(t)
	if n := endpoints(t, d); n != 1 {
		t.Fatalf("%d endpoints after the flood, want the one applied before", n)
	}
	lines := d.log.count()
	t.Logf("%d empty frames: %d log lines (%d before the flood), bound %d", emptyFrames, lines-linesBefore, linesBefore, logBound)
	if lines > logBound {
		t.Errorf("%d log lines, bound %d", lines, logBound)
	}
	d.checkRSS(t)

	inW.Close() // Felix goes: dpd stops cleanly
	if err := d.waitExit(t, 30*time.Second); err != nil {
		t.Fatalf("dpd exit: %v", err)
	}
	if strings.Contains(d.log.text(), "panic") {
		t.Fatal("panic in the log")
	}
}

// endpoints is how many endpoints Inspect lists.
func endpoints(t *testing.T, d *daemon) int {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := dpdv1.NewInspectClient(conn).ListEndpoints(ctx, &dpdv1.ListEndpointsRequest{})
	if err != nil {
		t.Fatalf("ListEndpoints: %v", err)
	}
	return len(resp.GetEndpoints())
}
