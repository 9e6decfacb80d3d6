package e2e

import (
	"fmt"
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
// and that A admits the source, so the denial is dpd failing closed (dpd
// attaches its entry programs, not ready, as soon as the interface
// appears).
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

// endpointRemoval removes C's endpoint while its interface stays. Removal
// never detaches: dpd must fail the interface closed (one dpd_ifstate
// write), keeping only its own entry programs on it (and the link pins
// that hold TCX links), not ready, so that it drops all traffic; C's route
// goes; dpd keeps running and keeps serving the other endpoints.
func (e *env) endpointRemoval(t *testing.T) {
	e.apply(t, e.base([]string{profAllowAll}, nil))
	w := e.cl
	before := Observe(e.d.PinDir, w)
	// The checks below must be able to see what they look for.
	missing := append([]string(nil), before.Errs...)
	if !before.IfState || !before.IfReady {
		missing = append(missing, "a ready ifstate entry")
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
	Expect(t, Allowed(Ping(w, e.a.IP)))

	e.apply(t, Scenario{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Endpoint(e.a, []string{profAllowAll}),
		Endpoint(e.b, []string{profAllowAll}),
	})
	e.c.WaitRemoved(t, w.ID())

	var after Attachment
	var wrong []string
	deadline := time.Now().Add(cleanupTimeout)
	for {
		// Each Observe runs tc, bpftool and ip, which paces the loop.
		after = Observe(e.d.PinDir, w)
		if wrong = notFailedClosed(after); len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%s after its endpoint was removed: %s; want only dpd's entry programs, not ready: %s",
			w.HostIface, strings.Join(wrong, ", "), after)
	}
	if !e.d.Alive() {
		t.Fatalf("dpd exited during endpoint removal")
	}
	// Its interface drops: C reaches nobody (the host would route it to A).
	Expect(t, Denied(Ping(w, e.a.IP)), Denied(TCP(w, e.b.IP, tcpPort)))
	Expect(t, Allowed(Ping(e.a, e.b.IP)), Allowed(TCP(e.a, e.b.IP, tcpPort)))
}

// notFailedClosed lists how a, the state of an interface whose endpoint
// was removed, differs from the removal contract: dpd's two entry programs
// and nothing else attached (TCX links with their two pins, or two tc
// filters), a dpd_ifstate entry that is not ready, no route.
func notFailedClosed(a Attachment) []string {
	wrong := append([]string(nil), a.Errs...)
	if a.Route != "" {
		wrong = append(wrong, "a route")
	}
	switch {
	case !a.IfState:
		wrong = append(wrong, "no dpd_ifstate entry")
	case a.IfReady:
		wrong = append(wrong, "a ready dpd_ifstate entry")
	}
	tcx := 0
	for _, p := range a.Progs {
		if !strings.HasPrefix(p.Name, "dpd_") {
			wrong = append(wrong, "a program not dpd's ("+p.Name+")")
		}
		if strings.HasPrefix(p.Kind, "tcx") {
			tcx++
		}
	}
	if len(a.Progs) != 2 {
		wrong = append(wrong, fmt.Sprintf("%d programs attached, want dpd's 2 entry programs", len(a.Progs)))
	}
	if len(a.LinkPins) != tcx {
		wrong = append(wrong, fmt.Sprintf("%d link pins for %d TCX links", len(a.LinkPins), tcx))
	}
	return wrong
}

// leftovers lists what of dpd an interface still carries.
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
