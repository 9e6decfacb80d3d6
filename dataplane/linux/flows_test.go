package linux

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

func TestFlowEventFromRaw(t *testing.T) {
	clock := tcbpf.NewMonoClock()
	raw := tcbpf.FlowEvent{TsNs: 5e9, RuleId: 0xd1, Sport: 40000, Dport: 8080, Proto: 6, Family: 4,
		Dir: abi.DirToWEP, Verdict: abi.VerdictDeny, Ifindex: 7, Flags: abi.StNAT | abi.StTCPSyn,
		Suppressed: 3, NatPort: 80, Kind: abi.EvDecided}
	copy(raw.Saddr[:], []byte{10, 65, 0, 1})
	copy(raw.Daddr[:], []byte{10, 65, 0, 2})
	copy(raw.NatAddr[:], []byte{10, 96, 0, 10})
	ev := flowEvent(&raw, clock)
	want := model.FlowEvent{Time: clock.Time(5e9), Ifindex: 7, Direction: model.Ingress, Proto: 6,
		Src: netip.MustParseAddrPort("10.65.0.1:40000"), Dst: netip.MustParseAddrPort("10.65.0.2:8080"),
		Stage: model.TraceDecided, RuleID: 0xd1, Suppressed: 3, Frontend: netip.MustParseAddrPort("10.96.0.10:80")}
	if ev != want {
		t.Fatalf("event %+v\nwant  %+v", ev, want)
	}
	if d := time.Until(clock.Time(0)); d > 0 {
		t.Fatalf("boot time %v in the future", d)
	}

	raw.Kind, raw.Verdict, raw.Flags, raw.RuleId = abi.EvNoPolicy, abi.VerdictNone, 0, 0
	if ev := flowEvent(&raw, clock); ev.Stage != model.TraceNoPolicy || ev.Allowed || ev.Frontend.IsValid() {
		t.Fatalf("no-policy event %+v", ev)
	}
	raw.Kind, raw.Verdict = abi.EvDecided, abi.VerdictAllow
	if ev := flowEvent(&raw, clock); ev.Stage != model.TraceDecided || !ev.Allowed {
		t.Fatalf("allow event %+v", ev)
	}
}
