package flowfmt

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

func TestRuleLabel(t *testing.T) {
	for _, tc := range []struct {
		by   string
		r    *dpdv1.RuleRef
		want string
	}{
		{"policy", &dpdv1.RuleRef{Tier: "default", Policy: "default/web", Kind: "policy", Index: 1}, "default/web#1"},
		{"policy", &dpdv1.RuleRef{Tier: "sec", Policy: "web", Kind: "policy", Index: 0}, "sec/web#0"},
		{"profile", &dpdv1.RuleRef{Policy: "kns.ns", Kind: "profile", Index: 2}, "profile:kns.ns#2"},
		{"tier-default", &dpdv1.RuleRef{Tier: "sec", Synthetic: "tier-default", Index: -1}, "sec/tier-default"},
		{"no-match", &dpdv1.RuleRef{Synthetic: "no-match", Index: -1}, "no-match"},
		{"policy", &dpdv1.RuleRef{CounterId: 0xab}, "counter ab"},
		{"no policy", nil, "no policy"},
	} {
		if got := RuleLabel(tc.by, tc.r); got != tc.want {
			t.Errorf("RuleLabel(%s, %v) = %q, want %q", tc.by, tc.r, got, tc.want)
		}
	}
}

func TestFlowLine(t *testing.T) {
	f := &dpdv1.Flow{
		Time:        timestamppb.New(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)),
		Source:      &dpdv1.FlowPeer{Ip: "10.65.0.2", Port: 40000, Endpoint: "k8s/ns/web/eth0"},
		Destination: &dpdv1.FlowPeer{Ip: "10.65.0.3", Port: 80},
		Protocol:    "tcp", Direction: "egress", Verdict: "deny", DecidedBy: "policy",
		Rule:       &dpdv1.RuleRef{Tier: "default", Policy: "default/web", Kind: "policy", Index: 1},
		Suppressed: 3, ServiceIp: "10.96.0.1", ServicePort: 80,
	}
	got := FlowLine(f)
	for _, want := range []string{"ns/web 10.65.0.2:40000 -> 10.65.0.3:80", "(service 10.96.0.1:80)", "tcp egress", "DENIED", "default/web#1", "+3 denied"} {
		if !strings.Contains(got, want) {
			t.Errorf("FlowLine = %q, missing %q", got, want)
		}
	}
}

func TestFlowLineEnded(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f := &dpdv1.Flow{
		Time: timestamppb.New(start.Add(31 * time.Second)), Started: timestamppb.New(start),
		Source:      &dpdv1.FlowPeer{Ip: "10.65.0.2", Port: 40000},
		Destination: &dpdv1.FlowPeer{Ip: "10.65.0.3", Port: 80},
		Protocol:    "tcp", Direction: "ingress", Verdict: "allow", DecidedBy: "policy", Ended: true,
		Rule:    &dpdv1.RuleRef{Tier: "default", Policy: "default/web", Kind: "policy", Index: 0},
		Forward: &dpdv1.FlowCounts{Packets: 6, Bytes: 400}, Reply: &dpdv1.FlowCounts{Packets: 4, Bytes: 1500},
	}
	got := FlowLine(f)
	for _, want := range []string{"ENDED", "default/web#0", "-> 6 pkts 400 B, <- 4 pkts 1500 B", "31s"} {
		if !strings.Contains(got, want) {
			t.Errorf("FlowLine = %q, missing %q", got, want)
		}
	}
	if strings.Contains(got, "ALLOWED") {
		t.Errorf("FlowLine = %q: an end is not a decision", got)
	}
	if strings.Contains(got, "evicted") {
		t.Errorf("FlowLine = %q: an expired flow is not evicted", got)
	}
	f.EndReason = "evicted"
	if got := FlowLine(f); !strings.Contains(got, "ENDED") || !strings.Contains(got, "(evicted: conntrack table full") {
		t.Errorf("FlowLine = %q, want ENDED … (evicted: conntrack table full …)", got)
	}
}

func TestFlowLineStaged(t *testing.T) {
	f := &dpdv1.Flow{
		Time:        timestamppb.New(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)),
		Source:      &dpdv1.FlowPeer{Ip: "10.65.0.2", Port: 40000},
		Destination: &dpdv1.FlowPeer{Ip: "10.65.0.3", Port: 80},
		Protocol:    "tcp", Direction: "ingress", Verdict: "allow", DecidedBy: "profile",
		Rule:          &dpdv1.RuleRef{Policy: "allow-all", Kind: "profile", Index: 0},
		StagedVerdict: "deny", StagedDecidedBy: "policy",
		StagedRule: &dpdv1.RuleRef{Tier: "t1", Policy: "t1/StagedNetworkPolicy:ns/lock", Kind: "policy", Index: 0},
	}
	got := FlowLine(f)
	for _, want := range []string{"ALLOWED  profile:allow-all#0", "staged: would deny  t1/StagedNetworkPolicy:ns/lock#0"} {
		if !strings.Contains(got, want) {
			t.Errorf("FlowLine = %q, missing %q", got, want)
		}
	}
}
