package e2e

import (
	"fmt"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// describe names a message by kind and id, for comparing sequences.
func describe(m *felix.ToDataplane) string {
	switch {
	case m.GetIpsetUpdate() != nil:
		return "ipset " + m.GetIpsetUpdate().GetId()
	case m.GetIpsetRemove() != nil:
		return "-ipset " + m.GetIpsetRemove().GetId()
	case m.GetActiveProfileUpdate() != nil:
		return "profile " + m.GetActiveProfileUpdate().GetId().GetName()
	case m.GetActiveProfileRemove() != nil:
		return "-profile " + m.GetActiveProfileRemove().GetId().GetName()
	case m.GetActivePolicyUpdate() != nil:
		return "policy " + m.GetActivePolicyUpdate().GetId().GetName()
	case m.GetActivePolicyRemove() != nil:
		return "-policy " + m.GetActivePolicyRemove().GetId().GetName()
	case m.GetWorkloadEndpointUpdate() != nil:
		return "wep " + m.GetWorkloadEndpointUpdate().GetId().GetWorkloadId()
	case m.GetWorkloadEndpointRemove() != nil:
		return "-wep " + m.GetWorkloadEndpointRemove().GetId().GetWorkloadId()
	}
	return fmt.Sprintf("%T", m.GetPayload())
}

func TestScenarioMessages(t *testing.T) {
	a := &Workload{Workload: &testutil.Workload{HostIface: "cali1", IP: "10.65.0.1"}, Pod: "pod1", MAC: "02:00:00:00:00:01"}
	b := &Workload{Workload: &testutil.Workload{HostIface: "cali2", IP: "10.65.0.2"}, Pod: "pod2", MAC: "02:00:00:00:00:02"}
	first := Scenario{
		Endpoint(b, []string{"p"}, Tier("t1", "", []string{"t1.x"}, nil)),
		Policy("t1", "t1.x", Rules(Allow(SrcIPSets("s"))), nil),
		IPSet("s", felix.IPSetUpdate_IP, "10.65.0.1"),
		Profile("p", Rules(Allow()), nil),
		Endpoint(a, []string{"p"}),
	}
	second := Scenario{
		Profile("p", Rules(Allow()), nil),
		Endpoint(a, []string{"p"}),
		Endpoint(b, []string{"p"}),
	}
	tests := []struct {
		name     string
		from, to Scenario
		want     []string
	}{
		{"snapshot in dependency order", nil, first,
			[]string{"ipset s", "profile p", "policy t1.x", "wep ns/pod1", "wep ns/pod2"}},
		{"unchanged is not re-sent", first, first, nil},
		{"updates then removals in reverse order", first, second,
			[]string{"wep ns/pod2", "-policy t1.x", "-ipset s"}},
		{"removal of endpoints before what they use", second, Scenario{Profile("q", nil, nil)},
			[]string{"profile q", "-wep ns/pod1", "-wep ns/pod2", "-profile p"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msgs, err := tc.to.Messages(tc.from)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range msgs {
				got = append(got, describe(m))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := (Scenario{InSync()}).Messages(nil); err == nil {
		t.Error("a scenario holding InSync must be rejected")
	}
}

func TestTierAndRuleBuilders(t *testing.T) {
	ti := Tier("t1", "Pass", []string{"a", "b"}, []string{"c"})
	if len(ti.GetIngressPolicies()) != 2 || ti.GetEgressPolicies()[0].GetName() != "c" || ti.GetDefaultAction() != "Pass" {
		t.Errorf("tier: %v", ti)
	}
	r := Allow(Proto("tcp"), NotDstPorts(Port(80), Ports(90, 99)), ICMPTypeCode(8, 0), NotSrcIPSets("x"))
	if r.GetAction() != "allow" || r.GetProtocol().GetName() != "tcp" || len(r.GetNotDstPorts()) != 2 ||
		r.GetIcmpTypeCode().GetType() != 8 || r.GetNotSrcIpSetIds()[0] != "x" {
		t.Errorf("rule: %v", r)
	}
}
