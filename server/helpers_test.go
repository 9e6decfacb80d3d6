package server_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client"
	"github.com/dpd-dev/dpd/client/ctl"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Endpoint ids of examples/basic.yaml, as dpd names them.
const (
	epA = "k8s/demo/demo-a/eth0"
	epB = "k8s/demo/demo-b/eth0"
	epC = "k8s/demo/demo-c/eth0"
)

var basicUp = map[string]string{epA: "up", epB: "up", epC: "up"}

// basicScenario is examples/basic.yaml, so the example is proven here too.
func basicScenario(t testing.TB) []*felix.ToDataplane {
	t.Helper()
	msgs, err := ctl.LoadScenario("../examples/basic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func dial(t testing.TB, socket string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// statusLog folds FromDataplane messages into the latest status per
// endpoint and whether DataplaneInSync arrived.
type statusLog struct {
	status map[string]string
	inSync int
}

func (l *statusLog) add(m *felix.FromDataplane) {
	if l.status == nil {
		l.status = map[string]string{}
	}
	if u := m.GetWorkloadEndpointStatusUpdate(); u != nil {
		id := u.GetId()
		l.status[id.GetOrchestratorId()+"/"+id.GetWorkloadId()+"/"+id.GetEndpointId()] = u.GetStatus().GetStatus()
	}
	if m.GetDataplaneInSync() != nil {
		l.inSync++
	}
}

func (l *statusLog) has(want map[string]string) bool {
	for id, st := range want {
		if l.status[id] != st {
			return false
		}
	}
	return true
}

// expect reads ch until every endpoint in want reports its wanted status
// (the latest report counts) and at least inSyncs DataplaneInSync arrived.
func expect(t *testing.T, ch <-chan *felix.FromDataplane, log *statusLog, want map[string]string, inSyncs int) {
	t.Helper()
	hang := time.NewTimer(20 * time.Second) // hang guard, not a timing assertion
	defer hang.Stop()
	for !log.has(want) || log.inSync < inSyncs {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("status stream closed; have %v (%d in-sync), want %v", log.status, log.inSync, want)
			}
			log.add(m)
		case <-hang.C:
			t.Fatalf("no such statuses; have %v (%d in-sync), want %v (%d in-sync)", log.status, log.inSync, want, inSyncs)
		}
	}
}

// eventually retries check until it passes. Inspect reads a snapshot the
// engine publishes at the end of the loop iteration that emitted the
// statuses, so right after a status it may lag briefly.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	var last error
	defer func() {
		if t.Failed() && last != nil {
			t.Logf("last attempt: %v", last)
		}
	}()
	testutil.WaitFor(t, 10*time.Second, what, func() bool { last = check(); return last == nil })
}

func with(m map[string]string, kv ...string) map[string]string {
	out := maps.Clone(m)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func wepUpdate(workload, iface string, nets ...string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
		Id:       &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: workload, EndpointId: "eth0"},
		Endpoint: &felix.WorkloadEndpoint{State: "active", Name: iface, Ipv4Nets: nets, ProfileIds: []string{"kns.demo"}},
	}}}
}
