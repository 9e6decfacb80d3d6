package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dpd-dev/dpd/dataplane/model"
)

func TestFlowLogAggregates(t *testing.T) {
	s, k := observeFixture()
	var out bytes.Buffer
	a := newFlowAggregator(k, s.engine, &out, time.Minute, slog.Default())
	a.winStart = flowT0
	for _, ev := range k.history {
		a.add(&ev)
	}
	a.add(&k.history[0]) // the same denied flow reported again: one aggregate, two flows
	a.flush(flowT0.Add(time.Minute))

	var recs []FlowLogRecord
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r FlowLogRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3:\n%s", len(recs), out.String())
	}
	var denied *FlowLogRecord
	for i := range recs {
		if recs[i].Policy == "default/web#1" {
			denied = &recs[i]
		}
	}
	if denied == nil || denied.NumFlows != 2 || denied.NumPackets != 10 || denied.Action != "deny" ||
		denied.Source != "k8s/ns/web/eth0" || denied.Dest != "10.65.0.9" || denied.DestPort != 80 || denied.Proto != "tcp" ||
		!denied.StartTime.Equal(flowT0) || !denied.EndTime.Equal(flowT0.Add(time.Minute)) {
		t.Fatalf("denied aggregate %+v in\n%s", denied, out.String())
	}
	// The next interval starts empty.
	out.Reset()
	a.flush(flowT0.Add(2 * time.Minute))
	if out.Len() != 0 {
		t.Fatalf("empty interval wrote %q", out.String())
	}

	want := `
# HELP dpd_flows_total New flows decided, by verdict and deciding policy (denied flows at most once per flow per second); at most 500 policies, the rest as policy "_other".
# TYPE dpd_flows_total counter
dpd_flows_total{policy="_no_policy",tier="",verdict="deny"} 1
dpd_flows_total{policy="default/db",tier="default",verdict="allow"} 1
dpd_flows_total{policy="default/web",tier="default",verdict="deny"} 2
`
	if err := testutil.CollectAndCompare(a, strings.NewReader(want), "dpd_flows_total"); err != nil {
		t.Fatal(err)
	}
}

func TestFlowMetricsCardinalityBounded(t *testing.T) {
	s, k := observeFixture()
	a := newFlowAggregator(k, s.engine, nil, time.Minute, slog.Default())
	for i := range maxFlowPolicySeries + 50 {
		ev := model.FlowEvent{Stage: model.TraceDecided, RuleFound: true,
			Rule: model.RuleInfo{Tier: "t", Policy: "t/p" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)}}
		a.add(&ev)
	}
	if n := testutil.CollectAndCount(a, "dpd_flows_total"); n != maxFlowPolicySeries+1 {
		t.Fatalf("%d series, want %d and _other", n, maxFlowPolicySeries)
	}
}
