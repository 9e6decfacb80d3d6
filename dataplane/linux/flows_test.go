package linux

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/flowhist"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
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

// TestFlowObserverKernel: real pings between two programmed interfaces,
// after the datapath was reopened at new sizes, arrive at a subscriber
// named by interface and rule; Close ends the subscription.
func TestFlowObserverKernel(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	// A resize before any endpoint reopens the datapath: the reader moves.
	if err := k.Configure(map[string]string{"InterfacePrefix": testPrefix, tcbpf.ConfigEvents: "65536"}); err != nil {
		t.Fatal(err)
	}
	if n := k.datapath().Sizes().Events; n != 65536 {
		t.Fatalf("ring of %d bytes after the resize, want 65536: not reopened", n)
	}
	watch(t, k)
	a, b := newWorkload(t, "10.77.9.1"), newWorkload(t, "10.77.9.2")
	testutil.WaitFor(t, 5*time.Second, "both interfaces seen", func() bool {
		_, okA := k.mon.Ifindex(a.HostIface)
		_, okB := k.mon.Ifindex(b.HostIface)
		return okA && okB
	})
	for _, ep := range []*model.Endpoint{endpointFor(a, 1, allowAll(), allowAll()), endpointFor(b, 2, denyAll(), allowAll())} {
		if err := applyKnown(t, k, ep); err != nil {
			t.Fatalf("apply %s: %v", ep.Iface, err)
		}
	}
	var fo engine.FlowObserver = k
	_, sub := fo.ObserveFlows(time.Time{}, 0, true, 100)
	defer sub.Close()
	if pingsQuick(a, b.IP) {
		t.Fatal("ping into b's deny profile passed")
	}
	var out, in *model.FlowEvent
	deadline := time.After(5 * time.Second)
	for out == nil || in == nil {
		select {
		case ev := <-sub.Events():
			switch {
			case ev.Iface == a.HostIface && ev.Direction == model.Egress && ev.Proto == 1:
				out = &ev
			case ev.Iface == b.HostIface && ev.Direction == model.Ingress && ev.Proto == 1:
				in = &ev
			}
		case <-deadline:
			t.Fatalf("no events of the ping at both hooks within 5s: egress %+v, ingress %+v", out, in)
		}
	}
	if !out.Allowed || !out.RuleFound || out.Rule.Policy != "allow" || out.Rule.Kind != "profile" ||
		out.Src.Addr().String() != a.IP || out.Dst.Addr().String() != b.IP {
		t.Errorf("egress event %+v, want allowed by profile allow", out)
	}
	if in.Allowed || in.Stage != model.TraceDecided || !in.RuleFound || in.Rule.Policy != "deny" {
		t.Errorf("ingress event %+v, want denied by profile deny", in)
	}
	if st := fo.FlowStats(); st.Read < 2 || st.Subscribers != 1 || st.HistoryCap != flowhistDefault() {
		t.Errorf("stats %+v", st)
	}
	_ = k.Close()
	testutil.WaitFor(t, 5*time.Second, "the subscription closed with the kernel", func() bool {
		select {
		case _, ok := <-sub.Events():
			return !ok
		default:
			return false
		}
	})
}

func flowhistDefault() int { return flowhist.DefaultCapacity }
