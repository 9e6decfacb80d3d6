package engine

import (
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// TestUnchangedEndpointPublishesNothing: an endpoint re-sent unchanged
// (every resync re-sends them all) marks nothing for Inspect's snapshot,
// while a first update, a change, and the same content after a removal
// each do, and the snapshot follows them. The test plays the engine's
// loop itself (the engine does not run).
func TestUnchangedEndpointPublishesNothing(t *testing.T) {
	e := New(fastOptions(memkernel.New()))
	id := model.WorkloadID{Orchestrator: "k8s", Workload: "a", Endpoint: "eth0"}
	step := func(what string, u model.Update, wantTouched bool) {
		t.Helper()
		e.dispatch(u, time.Now())
		if _, touched := e.weps.touched[id]; touched != wantTouched {
			t.Fatalf("%s: touched = %v, want %v", what, touched, wantTouched)
		}
		e.publish()
	}
	step("first update", tr(t, wep("a", "10.65.0.1", nil)), true)
	step("re-sent unchanged", tr(t, wep("a", "10.65.0.1", nil)), false)
	step("changed", tr(t, wep("a", "10.65.0.2", nil)), true)
	if info, ok := e.Endpoint(id.String()); !ok || len(info.IPv4Nets) != 1 || info.IPv4Nets[0] != "10.65.0.2/32" {
		t.Fatalf("snapshot after the change = %+v (present %v), want 10.65.0.2/32", info, ok)
	}
	step("removed", tr(t, wepRemove("a")), true)
	if info, _ := e.Endpoint(id.String()); !info.Dirty {
		t.Fatalf("snapshot after the removal = %+v, want it dirty", info)
	}
	step("same content after the removal", tr(t, wep("a", "10.65.0.2", nil)), true)
}
