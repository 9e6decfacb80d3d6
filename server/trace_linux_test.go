package server_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client/ctl"
	"github.com/dpd-dev/dpd/dataplane/linux"
	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server"
	"github.com/dpd-dev/dpd/server/servertest"
)

func traceWEP(w *testutil.Workload, name string) *felix.ToDataplane {
	tier := &felix.TierInfo{Name: "default",
		IngressPolicies: []*felix.PolicyID{{Name: "web"}}, EgressPolicies: []*felix.PolicyID{{Name: "web"}}}
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
		Id:       &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "trace/" + name, EndpointId: "eth0"},
		Endpoint: &felix.WorkloadEndpoint{State: "active", Name: w.HostIface, Ipv4Nets: []string{w.IP + "/32"}, Tiers: []*felix.TierInfo{tier}},
	}}}
}

// TestTraceLinux runs dpd on the linux dataplane with two workloads and a
// policy whose second inbound rule denies tcp/8080: Trace names that rule
// for a tcp/8080 packet, says a ping is allowed (and a real ping passes),
// and leaves the rule counters as they were. Kernel metrics are exported.
func TestTraceLinux(t *testing.T) {
	testutil.RequirePrivileged(t)
	pin := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpd-trace-test-%d", os.Getpid()))
	t.Cleanup(func() { _ = os.RemoveAll(pin) })
	lk, err := linux.New(linux.Options{PinDir: pin, Log: servertest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	d := servertest.StartKernel(t, server.Config{Dataplane: "linux", RuleMetrics: true}, lk)
	t.Cleanup(func() { // after the daemon stops (cleanups run last first)
		_ = lk.Close()
	})
	a := testutil.NewWorkload(t, "cali", "10.77.0.1")
	b := testutil.NewWorkload(t, "cali", "10.77.0.2")

	icmp := &felix.Protocol{NumberOrName: &felix.Protocol_Name{Name: "icmp"}}
	tcp := &felix.Protocol{NumberOrName: &felix.Protocol_Name{Name: "tcp"}}
	web := &felix.ActivePolicyUpdate{Id: &felix.PolicyID{Name: "web"}, Policy: &felix.Policy{Tier: "default",
		InboundRules: []*felix.Rule{
			{Action: "allow", Protocol: icmp, RuleId: "allow-icmp"},
			{Action: "deny", Protocol: tcp, DstPorts: []*felix.PortRange{{First: 8080, Last: 8080}}, RuleId: "deny-8080"},
			{Action: "allow", RuleId: "allow-rest"},
		},
		OutboundRules: []*felix.Rule{{Action: "allow", RuleId: "allow-out"}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dial(t, d.Socket)
	stream, err := c.Dataplane().Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*felix.ToDataplane{
		{Payload: &felix.ToDataplane_ConfigUpdate{ConfigUpdate: &felix.ConfigUpdate{Config: map[string]string{"InterfacePrefix": "cali"}}}},
		{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: web}},
		traceWEP(a, "a"), traceWEP(b, "b"),
		{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}},
	} {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	ch := make(chan *felix.FromDataplane)
	go func() {
		defer close(ch)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			ch <- m
		}
	}()
	expect(t, ch, &statusLog{}, map[string]string{"k8s/trace/a/eth0": "up", "k8s/trace/b/eth0": "up"}, 1)
	ic := c.Inspect()

	counter := func(ruleID string) uint64 {
		t.Helper()
		resp, err := ic.GetCounters(ctx, &dpdv1.GetCountersRequest{Endpoint: "trace/b"})
		if err != nil {
			t.Fatal(err)
		}
		for _, rc := range resp.GetCounters() {
			if rc.GetRule().GetRuleId() == ruleID && rc.GetRule().GetDirection() == "ingress" {
				return rc.GetPackets()
			}
		}
		t.Fatalf("no counter for rule %s in %v", ruleID, resp)
		return 0
	}
	before := counter("deny-8080")

	tr, err := ic.Trace(ctx, &dpdv1.TraceRequest{Endpoint: "trace/b", Direction: "ingress", Protocol: "tcp",
		SrcIp: a.IP, SrcPort: 40000, DstPort: 8080})
	if err != nil {
		t.Fatal(err)
	}
	r := tr.GetRule()
	if tr.GetVerdict() != "deny" || tr.GetDecidedBy() != "policy" || r.GetIndex() != 1 || r.GetRuleId() != "deny-8080" ||
		r.GetTier() != "default" || !strings.HasSuffix(r.GetPolicy(), "web") || tr.GetInterface() != b.HostIface {
		t.Fatalf("trace of tcp/8080 = %v, want deny by rule 1 (deny-8080) of policy web in tier default", tr)
	}
	if after := counter("deny-8080"); after != before {
		t.Errorf("trace moved the deny rule's counter from %d to %d", before, after)
	}

	// dpdctl answers the same question for a human.
	var stdout, stderr bytes.Buffer
	code := ctl.Main([]string{"--socket", d.Socket, "trace", "--endpoint", "trace/b", "--dir", "ingress",
		"--proto", "tcp", "--src", a.IP, "--sport", "40000", "--dport", "8080"}, &stdout, &stderr)
	t.Logf("dpdctl trace:\n%s", stdout.String())
	if code != 0 || !strings.Contains(stdout.String(), "DENY") || !strings.Contains(stdout.String(), "deny-8080") {
		t.Errorf("dpdctl trace exit %d:\n%s%s", code, stdout.String(), stderr.String())
	}

	ping, err := ic.Trace(ctx, &dpdv1.TraceRequest{Endpoint: "trace/b", Direction: "ingress", Protocol: "icmp", SrcIp: a.IP})
	if err != nil {
		t.Fatal(err)
	}
	if ping.GetVerdict() != "allow" || ping.GetRule().GetRuleId() != "allow-icmp" {
		t.Fatalf("trace of a ping = %v, want allow by allow-icmp", ping)
	}
	out, err := ic.Trace(ctx, &dpdv1.TraceRequest{Endpoint: "trace/a", Direction: "egress", Protocol: "icmp", DstIp: b.IP})
	if err != nil || out.GetVerdict() != "allow" || out.GetRule().GetRuleId() != "allow-out" {
		t.Fatalf("trace of a's ping leaving = %v, %v", out, err)
	}
	// IPv6 through the same program: tcp/8080 meets the same deny rule;
	// "icmp" between IPv6 addresses is ICMPv6, which the icmp (1) rule does
	// not match; a neighbour solicitation passes without policy.
	v6 := func(proto string, icmpType *uint32) *dpdv1.TraceResponse {
		t.Helper()
		r, err := ic.Trace(ctx, &dpdv1.TraceRequest{Endpoint: "trace/b", Direction: "ingress", Protocol: proto,
			SrcIp: "fd00:77::1", DstIp: "fd00:77::2", SrcPort: 40000, DstPort: 8080, IcmpType: icmpType})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := v6("tcp", nil); r.GetVerdict() != "deny" || r.GetRule().GetRuleId() != "deny-8080" {
		t.Errorf("IPv6 trace of tcp/8080 = %v, want deny by deny-8080", r)
	}
	if r := v6("icmp", nil); r.GetVerdict() != "allow" || r.GetRule().GetRuleId() != "allow-rest" {
		t.Errorf("IPv6 trace of a ping = %v, want allow by allow-rest (icmp rules are IPv4's)", r)
	}
	ns := uint32(135)
	if r := v6("icmpv6", &ns); r.GetVerdict() != "allow" || r.GetDecidedBy() != "exempt: neighbour discovery" {
		t.Errorf("IPv6 trace of a neighbour solicitation = %v, want allowed without policy", r)
	}
	stdout.Reset()
	if code := ctl.Main([]string{"--socket", d.Socket, "trace", "--endpoint", "trace/b", "--dir", "ingress",
		"--proto", "tcp", "--src", "fd00:77::1", "--dst", "fd00:77::2", "--dport", "8080"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "deny-8080") {
		t.Errorf("dpdctl trace of IPv6 exit %d:\n%s%s", code, stdout.String(), stderr.String())
	}

	// What Trace allows, the kernel passes.
	testutil.WaitFor(t, 10*time.Second, "a ping a -> b, which Trace allowed, to pass", func() bool {
		_, err := a.Exec("ping", "-c1", "-W1", b.IP)
		return err == nil
	})
	if n := counter("allow-icmp"); n == 0 {
		t.Errorf("the real ping did not count on allow-icmp")
	}
	stdout.Reset()
	if code := ctl.Main([]string{"--socket", d.Socket, "counters", "--endpoint", "trace/b", "--nonzero"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "allow-icmp") {
		t.Errorf("dpdctl counters exit %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	t.Logf("dpdctl counters:\n%s", stdout.String())

	if v := d.MetricWhere(t, "dpd_bpf_map_entries", map[string]string{"map": "dpd_ifstate"}); v < 2 {
		t.Errorf("dpd_bpf_map_entries{map=dpd_ifstate} = %v, want >= 2", v)
	}
	if v := d.MetricWhere(t, "dpd_bpf_map_capacity", map[string]string{"map": "dpd_conntrack"}); v <= 0 {
		t.Errorf("dpd_bpf_map_capacity{map=dpd_conntrack} = %v", v)
	}
	if v := d.MetricWhere(t, "dpd_rule_packets_total", map[string]string{"rule_id": "allow-icmp", "direction": "ingress"}); v == 0 {
		t.Errorf("dpd_rule_packets_total for allow-icmp = %v, want > 0", v)
	}
}
