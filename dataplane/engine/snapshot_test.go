package engine

import (
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// TestEndpointLookup: Endpoint finds an endpoint by its full id (the
// workload name may hold slashes) or by a workload name that only one
// endpoint has, from the index, and forgets removed ones.
func TestEndpointLookup(t *testing.T) {
	e := &Engine{}
	e.snap.init()
	a := model.WorkloadID{Orchestrator: "k8s", Workload: "demo/a", Endpoint: "eth0"}
	b0 := model.WorkloadID{Orchestrator: "k8s", Workload: "demo/b", Endpoint: "eth0"}
	b1 := model.WorkloadID{Orchestrator: "k8s", Workload: "demo/b", Endpoint: "eth1"}
	for _, id := range []model.WorkloadID{a, b0, b1} {
		e.snap.putLocked(id, &EndpointInfo{ID: id, Iface: "cali-" + id.Endpoint})
	}
	for _, c := range []struct {
		key  string
		want model.WorkloadID
		ok   bool
	}{
		{"k8s/demo/a/eth0", a, true},
		{"demo/a", a, true},
		{"k8s/demo/b/eth1", b1, true},
		{"demo/b", model.WorkloadID{}, false}, // two endpoints: ambiguous
		{"k8s/demo/c/eth0", model.WorkloadID{}, false},
		{"nope", model.WorkloadID{}, false},
		{"", model.WorkloadID{}, false},
	} {
		info, ok := e.Endpoint(c.key)
		if ok != c.ok || info.ID != c.want {
			t.Errorf("Endpoint(%q) = %v, %t; want %v, %t", c.key, info.ID, ok, c.want, c.ok)
		}
	}
	e.snap.putLocked(b0, nil)
	if info, ok := e.Endpoint("demo/b"); !ok || info.ID != b1 {
		t.Errorf("after removing %v: Endpoint(demo/b) = %v, %t; want %v", b0, info.ID, ok, b1)
	}
	e.snap.putLocked(b1, nil)
	if len(e.snap.byWorkload) != 1 {
		t.Errorf("index keeps %d workloads, want 1", len(e.snap.byWorkload))
	}
}
