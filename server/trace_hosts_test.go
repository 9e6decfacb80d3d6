package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// On a host interface unpoliced and policy-less packets pass, and the
// exemptions say what the policy would.
func TestExplainHostTrace(t *testing.T) {
	deny := model.RuleInfo{CounterID: 14, Index: -1, Action: model.ActionDeny, Synthetic: model.SyntheticNoMatch}
	decided := model.TraceResult{Host: true, Stage: model.TraceDecided, RuleID: 14, Rule: deny, RuleFound: true}
	with := func(r model.TraceResult, f func(*model.TraceResult)) model.TraceResult { f(&r); return r }
	tests := []struct {
		name                      string
		res                       model.TraceResult
		verdict, decidedBy, inExp string
	}{
		{"unpoliced", model.TraceResult{Host: true, Stage: model.TraceNotReady}, "allow", "unpoliced", "never failed closed"},
		{"no policy", model.TraceResult{Host: true, Stage: model.TraceNoPolicy}, "allow", "no policy", "forward policy"},
		{"related, no policy", model.TraceResult{Host: true, Stage: model.TraceNoPolicy, Conntrack: "related"}, "allow", "conntrack: related", "related"},
		{"denied", decided, "deny", "no-match", "no policy or profile matched"},
		{"failsafe", with(decided, func(r *model.TraceResult) { r.Exempt = "failsafe port" }), "allow", "exempt: failsafe port",
			"the policy would say: deny: no policy or profile matched"},
		{"neighbour discovery", with(decided, func(r *model.TraceResult) { r.Exempt = "neighbour discovery" }), "allow",
			"exempt: neighbour discovery", "router advertisement"},
		{"failsafe, no policy", model.TraceResult{Host: true, Stage: model.TraceNoPolicy, Exempt: "failsafe port"}, "allow",
			"exempt: failsafe port", "would say: allow: no policy"},
		{"workload not ready still denies", model.TraceResult{Stage: model.TraceNotReady}, "deny", "not ready", "not ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := explainTrace(tt.res, model.Ingress)
			if got.GetVerdict() != tt.verdict || got.GetDecidedBy() != tt.decidedBy || !strings.Contains(got.GetExplanation(), tt.inExp) {
				t.Fatalf("got %q %q %q\nwant %q %q ...%q...", got.GetVerdict(), got.GetDecidedBy(), got.GetExplanation(), tt.verdict, tt.decidedBy, tt.inExp)
			}
		})
	}
}

type fakeHostEngine struct {
	fakeEngine
	hosts []engine.HostEndpointInfo
}

func (f fakeHostEngine) HostEndpoints() []engine.HostEndpointInfo { return f.hosts }

// A trace names a host interface by its host endpoint's id, with the
// interface when the endpoint binds several; its expected addresses are
// the host side's defaults.
func TestHostTraceEndpoint(t *testing.T) {
	s := &inspectService{engine: fakeHostEngine{hosts: []engine.HostEndpointInfo{
		{ID: "node-eth0", Ifaces: []string{"eth0"}, Expect: []string{"192.0.2.1", "fd00::1"}},
		{ID: "all", Ifaces: []string{"eth1", "eth2"}},
	}}}
	ep, ok, err := s.hostTraceEndpoint("node-eth0")
	if err != nil || !ok || ep.Iface != "eth0" || ep.ID.String() != "hostendpoint/node-eth0/eth0" ||
		ownAddr(ep, true) != "fd00::1" || ownAddr(ep, false) != "192.0.2.1" {
		t.Fatalf("node-eth0: %+v %v %v", ep, ok, err)
	}
	if ep, ok, err := s.hostTraceEndpoint("all/eth2"); err != nil || !ok || ep.Iface != "eth2" {
		t.Fatalf("all/eth2: %+v %v %v", ep, ok, err)
	}
	for name, code := range map[string]codes.Code{"all": codes.InvalidArgument, "all/eth9": codes.NotFound} {
		if _, ok, err := s.hostTraceEndpoint(name); !ok || status.Code(err) != code {
			t.Errorf("%s: ok %v err %v, want %v", name, ok, err, code)
		}
	}
	for _, name := range []string{"nope", "nope/eth0", "k8s/ns/pod/eth0"} {
		if _, ok, err := s.hostTraceEndpoint(name); ok || err != nil {
			t.Errorf("%s: ok %v err %v, want not found", name, ok, err)
		}
	}
}
