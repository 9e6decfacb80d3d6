package e2e

import (
	"strings"
	"testing"
	"time"
)

// cleanupTimeout bounds how long dpd may take to undo an endpoint after it
// reported the status removal.
const cleanupTimeout = 5 * time.Second

// unknownInterface: a workload interface that matches dpd's prefix but has
// no WorkloadEndpointUpdate must pass nothing, even when a CNI has already
// given it a route and proxy ARP. The control is the same wiring on an
// interface dpd does not watch, which must pass: it proves the wiring works
// and that A admits the source, so the denial is dpd failing closed.
//
// This needs dpd to attach to prefix-matching interfaces it has no endpoint
// for (DESIGN.md "Fail closed"); dataplane/linux attaches only in
// ApplyEndpoint so far, so this case fails until it does. When it does,
// endpointRemoval must still find nothing attached after a removal: the
// fail-closed hook of an unknown interface then has to be something other
// than dpd's per-endpoint attachment, or that expectation must change.
func (e *env) unknownInterface(t *testing.T) {
	e.apply(t, e.base([]string{profAllowAll}, nil))
	unknown := NewWorkload(t, 4)
	WireLikeCNI(t, unknown)
	foreign := NewForeignWorkload(t, "vtst", 5)

	Expect(t, Allowed(Ping(foreign, e.a.IP)))
	Expect(t, Denied(Ping(unknown, e.a.IP)), Denied(TCP(unknown, e.b.IP, tcpPort)))
	t.Logf("dpd on the unknown interface %s: %s", unknown.HostIface, Observe(e.d.PinDir, unknown))

	// Once the controller describes it, the same interface passes.
	s := append(e.base([]string{profAllowAll}, nil), Endpoint(unknown, []string{profAllowAll}))
	e.apply(t, s)
	e.c.WaitStatus(t, "up", unknown.ID())
	Expect(t, Allowed(Ping(unknown, e.a.IP)))

	// Forget it again before the namespace goes, as a controller would.
	e.apply(t, e.base([]string{profAllowAll}, nil))
	e.c.WaitRemoved(t, unknown.ID())
}

// endpointRemoval removes C's endpoint while its interface stays: dpd must
// take everything of it back (programs, link pins, route, ifstate entry),
// keep running, and keep serving the other endpoints.
func (e *env) endpointRemoval(t *testing.T) {
	e.apply(t, e.base([]string{profAllowAll}, nil))
	w := e.cl
	before := Observe(e.d.PinDir, w)
	// The checks below must be able to see what they look for.
	missing := append([]string(nil), before.Errs...)
	if !before.IfState {
		missing = append(missing, "ifstate entry")
	}
	if before.Route == "" {
		missing = append(missing, "route")
	}
	if e.legacy && (before.TCIngress == "" || before.TCEgress == "") {
		missing = append(missing, "tc filters")
	}
	if !e.legacy && (len(before.LinkPins) == 0 || len(before.Progs) == 0) {
		missing = append(missing, "tcx links and pins")
	}
	if len(missing) > 0 {
		t.Errorf("before removal, %s lacks %s: %s", w.HostIface, strings.Join(missing, ", "), before)
	}

	e.apply(t, Scenario{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Endpoint(e.a, []string{profAllowAll}),
		Endpoint(e.b, []string{profAllowAll}),
	})
	e.c.WaitRemoved(t, w.ID())

	var after Attachment
	var left []string
	deadline := time.Now().Add(cleanupTimeout)
	for {
		// Each Observe runs tc, bpftool and ip, which paces the loop.
		after = Observe(e.d.PinDir, w)
		if left = leftovers(after); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("%s still has %s after its endpoint was removed: %s",
			w.HostIface, strings.Join(left, ", "), after)
	}
	if !e.d.Alive() {
		t.Fatalf("dpd exited during endpoint removal")
	}
	Expect(t, Allowed(Ping(e.a, e.b.IP)), Allowed(TCP(e.a, e.b.IP, tcpPort)))
}

func leftovers(a Attachment) []string {
	left := append([]string(nil), a.Errs...)
	if a.TCIngress != "" || a.TCEgress != "" {
		left = append(left, "tc filters")
	}
	if len(a.Progs) > 0 {
		left = append(left, "attached programs")
	}
	if len(a.LinkPins) > 0 {
		left = append(left, "link pins")
	}
	if a.Route != "" {
		left = append(left, "a route")
	}
	if a.IfState {
		left = append(left, "a dpd_ifstate entry")
	}
	return left
}
