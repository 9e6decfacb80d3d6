package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
)

// endOf is the end event of fixture flow ev after it carried fwd and rev.
func endOf(ev model.FlowEvent, seq uint64, fwd, rev model.FlowCounts) model.FlowEvent {
	ev.Seq, ev.End, ev.Started, ev.Time = seq, true, ev.Time, ev.Time.Add(40*time.Second)
	ev.Forward, ev.Reply = fwd, rev
	return ev
}

func TestObserveEnds(t *testing.T) {
	s, k := observeFixture()
	allowed := k.history[1]
	end := endOf(allowed, 4, model.FlowCounts{Packets: 6, Bytes: 500}, model.FlowCounts{Packets: 5, Bytes: 2000})
	end.EndReason = model.FlowEndEvicted
	k.history = append(k.history, end)

	ends := observe(t, s, &dpdv1.ObserveRequest{Type: "end"})
	if len(ends) != 1 {
		t.Fatalf("type=end: %d flows, want 1", len(ends))
	}
	f := ends[0].GetFlow()
	if !f.GetEnded() || f.GetEndReason() != "evicted" || f.GetVerdict() != "allow" || f.GetRule().GetPolicy() != "default/db" ||
		f.GetForward().GetPackets() != 6 || f.GetForward().GetBytes() != 500 ||
		f.GetReply().GetPackets() != 5 || f.GetReply().GetBytes() != 2000 ||
		!f.GetStarted().AsTime().Equal(allowed.Time) || !f.GetTime().AsTime().Equal(allowed.Time.Add(40*time.Second)) {
		t.Fatalf("end flow = %v", f)
	}
	if n := len(observe(t, s, &dpdv1.ObserveRequest{Type: "new"})); n != 3 {
		t.Fatalf("type=new: %d flows, want the 3 decisions", n)
	}
	if n := len(observe(t, s, &dpdv1.ObserveRequest{})); n != 4 {
		t.Fatalf("no type: %d flows, want 4", n)
	}
	st := &observeStream{ctx: t.Context(), sent: make(chan *dpdv1.ObserveResponse, 1)}
	if err := s.Observe(&dpdv1.ObserveRequest{Type: "started"}, st); err == nil {
		t.Fatal("type=started accepted")
	}
}

func TestFlowLogCountsEnds(t *testing.T) {
	s, k := observeFixture()
	var out bytes.Buffer
	a := newFlowAggregator(k, s.engine, &out, time.Minute, slog.Default())
	a.winStart = flowT0
	allowed := k.history[1]
	a.add(&allowed)
	end1 := endOf(allowed, 4, model.FlowCounts{Packets: 6, Bytes: 500}, model.FlowCounts{Packets: 5, Bytes: 2000})
	end2 := endOf(allowed, 5, model.FlowCounts{Packets: 1, Bytes: 60}, model.FlowCounts{Packets: 0, Bytes: 0})
	end1.EndReason, end2.EndReason = model.FlowEndExpired, model.FlowEndEvicted
	a.add(&end1)
	a.add(&end2)
	a.flush(flowT0.Add(time.Minute))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d records, want the allowed flow's one:\n%s", len(lines), out.String())
	}
	var r FlowLogRecord
	if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
		t.Fatal(err)
	}
	if r.NumFlows != 1 || r.NumPackets != 1 || r.NumFlowsCompleted != 2 || r.NumFlowsEvicted != 1 || r.PacketsOut != 7 || r.BytesOut != 560 ||
		r.PacketsIn != 5 || r.BytesIn != 2000 || r.Action != "allow" || r.Policy != "default/db#0" {
		t.Fatalf("record %+v", r)
	}
	// Ends are not decisions: dpd_flows_total counted the allowed flow once.
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := a.byPolicy[flowPolicyKey{verdict: "allow", tier: "default", policy: "default/db"}]; n != 1 {
		t.Fatalf("dpd_flows_total for default/db = %d, want 1", n)
	}
}
