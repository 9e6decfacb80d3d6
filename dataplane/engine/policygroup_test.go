package engine

import (
	"testing"
)

// Endpoints with the same policy references get one PolicyGroup (a kernel
// shares their slot); other references another; an endpoint failed closed
// none, so its group's slot keeps the group's policy.
func TestPolicyGroupFromReferences(t *testing.T) {
	h := newHarness(t)
	s := h.session()
	h.send(profile("p", allowFrom()), profile("q", allowFrom()),
		wep("a", "10.65.0.1", nil, "p"), wep("b", "10.65.0.2", nil, "p"), wep("c", "10.65.0.3", nil, "q"), inSync())
	group := func(wl string) string {
		t.Helper()
		ep, ok := h.k.Endpoint(wid(wl))
		if !ok {
			t.Fatalf("endpoint %s not applied", wl)
		}
		return ep.PolicyGroup
	}
	if ga, gb, gc := group("a"), group("b"), group("c"); ga == "" || ga != gb || ga == gc {
		t.Fatalf("groups a=%q b=%q c=%q: want a and b in one group, c in another", ga, gb, gc)
	}
	// q allows what p allows: c enforces the same programs, yet its group
	// differs, and moving c onto p is applied (its group changes).
	h.send(wep("c", "10.65.0.3", nil, "p"))
	if group("c") != group("a") {
		t.Fatalf("c moved onto p keeps group %q, want a's %q", group("c"), group("a"))
	}
	h.submitBadNets(t, s, "b", "10.65.0.2")
	h.flush()
	if ep, _ := h.k.Endpoint(wid("b")); ep == nil || !dropsAll(ep) || ep.PolicyGroup != "" {
		t.Fatalf("failed-closed b: %+v, want it dropping everything in no group", ep)
	}
	if group("a") == "" {
		t.Fatal("a lost its group when b failed closed")
	}
}
