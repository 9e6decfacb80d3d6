package engine

import (
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// wepOn is workload wl on interface iface with the profile-less default.
func wepOn(wl, iface, ip string) *felix.ToDataplane {
	return td(&felix.WorkloadEndpointUpdate{Id: wepID(wl), Endpoint: &felix.WorkloadEndpoint{
		State: "active", Name: iface, Ipv4Nets: []string{ip + "/32"}}})
}

// TestInterfaceClaimedTwice: of two live endpoints naming one interface,
// the later (by arrival) gets "error" naming the other and is not
// programmed; when the holder goes away or moves, it is programmed.
func TestInterfaceClaimedTwice(t *testing.T) {
	h := newHarness(t)
	h.session()
	id := func(wl string) model.WorkloadID {
		return model.WorkloadID{Orchestrator: "k8s", Workload: wl, Endpoint: "eth0"}
	}
	programmedOn := func(wl string) string {
		t.Helper()
		ep, ok := h.k.Endpoint(id(wl))
		if !ok {
			return ""
		}
		return ep.Iface
	}
	expect := func(step, wl, status, reasonHas, iface string) {
		t.Helper()
		st, reason := h.endpointStatus(wl)
		if st != status || !strings.Contains(reason, reasonHas) {
			t.Fatalf("%s: %s is %q (%q), want %q with %q", step, wl, st, reason, status, reasonHas)
		}
		if got := programmedOn(wl); got != iface {
			t.Fatalf("%s: %s programmed on %q, want %q", step, wl, got, iface)
		}
		h.noViolations()
	}

	h.send(wepOn("a", "calix", "10.65.0.1"), inSync())
	expect("first", "a", statusUp, "", "calix")

	h.send(wepOn("b", "calix", "10.65.0.2"))
	expect("second on the same interface", "b", statusError, "interface calix is held by endpoint k8s/a/eth0", "")
	expect("second on the same interface", "a", statusUp, "", "calix")
	if got := statuses(h.sess.snapshot(), "b"); len(got) != 1 || got[0] != statusError {
		t.Fatalf("statuses of b %v, want [error]", got)
	}

	h.send(wepRemove("a"))
	expect("holder removed", "b", statusUp, "", "calix")

	h.send(wepOn("a", "calix", "10.65.0.1"))
	expect("back, now second", "a", statusError, "held by endpoint k8s/b/eth0", "")

	h.send(wepOn("b", "caliy", "10.65.0.2"))
	expect("holder moved", "a", statusUp, "", "calix")
	expect("holder moved", "b", statusUp, "", "caliy")

	// In one batch the order of arrival decides, not the order of names.
	h.send(wepOn("d", "caliz", "10.65.0.4"), wepOn("c", "caliz", "10.65.0.3"))
	expect("same batch", "d", statusUp, "", "caliz")
	expect("same batch", "c", statusError, "held by endpoint k8s/d/eth0", "")

	// An endpoint moving onto a held interface leaves its old one.
	h.send(wepOn("e", "calie", "10.65.0.5"))
	expect("own interface", "e", statusUp, "", "calie")
	h.send(wepOn("e", "calix", "10.65.0.5"))
	expect("moved onto a held interface", "e", statusError, "held by endpoint k8s/a/eth0", "")

	// Re-sent unchanged in a new session: the holder stays and nothing is
	// re-applied.
	h.k.ResetCalls()
	h.session()
	h.send(wepOn("a", "calix", "10.65.0.1"), wepOn("b", "caliy", "10.65.0.2"), wepOn("d", "caliz", "10.65.0.4"),
		wepOn("c", "caliz", "10.65.0.3"), wepOn("e", "calix", "10.65.0.5"), inSync())
	expect("resync", "a", statusUp, "", "calix")
	expect("resync", "c", statusError, "held by endpoint k8s/d/eth0", "")
	expect("resync", "e", statusError, "held by endpoint k8s/a/eth0", "")
	if w := writes(h.k.Calls()); w != 0 {
		t.Fatalf("resync of unchanged endpoints made %d kernel writes: %v", w, h.k.Calls())
	}
}
