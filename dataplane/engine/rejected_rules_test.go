package engine

import (
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
)

// badRule cannot be translated: its source net does not parse.
func badRule() *felix.Rule { return &felix.Rule{Action: "allow", SrcNet: []string{"not-a-net"}} }

// onlyDenies reports whether every rule of the direction's policies and
// profiles is a deny.
func onlyDenies(p model.DirectionPolicy) bool {
	for _, rl := range p.RuleLists() {
		for _, r := range rl {
			if r.Action != model.ActionDeny {
				return false
			}
		}
	}
	return true
}

// An update of a policy or profile that is rejected, but names what it is
// for, never leaves its users enforcing the older, possibly more
// permissive, version while reported up: they enforce a deny in its place
// and go to error naming it, until a valid update repairs them.
func TestRejectedPolicyUpdateFailsItsUsersClosed(t *testing.T) {
	h := newHarness(t)
	s := h.session()
	h.send(policy("open", allowFrom()), profile("prof", allowFrom()),
		wep("a", "10.65.0.1", []string{"open"}), wep("b", "10.65.0.2", nil, "prof"), wep("c", "10.65.0.3", nil), inSync())
	for _, wl := range []string{"a", "b"} {
		if st, _ := h.endpointStatus(wl); st != statusUp {
			t.Fatalf("%s: status %q before", wl, st)
		}
	}
	for _, m := range []*felix.ToDataplane{policy("open", badRule()), profile("prof", badRule())} {
		if err := submitFelix(h.ctx, s, m); err != nil {
			t.Fatal(err)
		}
	}
	h.flush()
	for wl, what := range map[string]string{"a": "policy open", "b": "profile prof"} {
		st, reason := h.endpointStatus(wl)
		if st != statusError || !strings.Contains(reason, "rejected update of "+what) {
			t.Errorf("%s: status %q reason %q, want error naming the rejected %s", wl, st, reason, what)
		}
		ep, _ := h.k.Endpoint(wid(wl))
		if ep == nil || !onlyDenies(ep.Ingress) {
			t.Errorf("%s still enforces %+v after its %s was rejected", wl, ep, what)
		}
	}
	if st, _ := h.endpointStatus("c"); st != statusUp {
		t.Errorf("c, which uses neither, is %q", st)
	}
	h.send(policy("open", allowFrom()), profile("prof", allowFrom()))
	for _, wl := range []string{"a", "b"} {
		if st, reason := h.endpointStatus(wl); st != statusUp {
			t.Errorf("%s: status %q (%s) after the valid update", wl, st, reason)
		}
		if ep, _ := h.k.Endpoint(wid(wl)); ep == nil || onlyDenies(ep.Ingress) {
			t.Errorf("%s enforces %+v after the valid update", wl, ep)
		}
	}
	if h.e.policies.invalid != 0 || h.e.profiles.invalid != 0 {
		t.Errorf("invalid counts %d/%d after repair", h.e.policies.invalid, h.e.profiles.invalid)
	}
}
