package linux

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

func TestFlowEndFromConntrack(t *testing.T) {
	key := tcbpf.CTKey{Sport: 40000, Dport: 80, Proto: 6, Dir: abi.DirToWEP, Ifindex: 9}
	copy(key.Saddr[:], []byte{10, 65, 0, 2})
	copy(key.Daddr[:], []byte{10, 65, 0, 3})
	v := tcbpf.CTVal{Created: 5e9, LastSeen: 6e9, Flags: abi.CTFNATFwd, RuleId: 0xa1,
		PktsFwd: 3, BytesFwd: 180, PktsRev: 2, BytesRev: 3000, NatPort: 443}
	copy(v.NatAddr[:], []byte{10, 96, 0, 1})
	now := time.Now()
	clock := tcbpf.NewMonoClock()
	ev := flowEnd(&key, &v, now, clock)
	want := model.FlowEvent{
		Time: now, Started: clock.Time(5e9), Ifindex: 9, Direction: model.Ingress, Proto: 6,
		Src: netip.MustParseAddrPort("10.65.0.2:40000"), Dst: netip.MustParseAddrPort("10.65.0.3:80"),
		Stage: model.TraceDecided, Allowed: true, RuleID: 0xa1, End: true,
		Forward: model.FlowCounts{Packets: 3, Bytes: 180}, Reply: model.FlowCounts{Packets: 2, Bytes: 3000},
		Frontend: netip.MustParseAddrPort("10.96.0.1:443"),
	}
	if ev != want {
		t.Fatalf("flowEnd = %+v\nwant      %+v", ev, want)
	}
	var six [16]byte
	copy(six[:], netip.MustParseAddr("fd00::5").AsSlice())
	if a := ctAddr(six, true); a != netip.MustParseAddr("fd00::5") {
		t.Fatalf("ctAddr(fd00::5) = %v", a)
	}
}

// TestFlowEndsKernel: an allowed ping's conntrack entries expire (ICMP:
// 5 s idle) and the scanner reports each hook's end with the allowing rule
// and the echo requests and replies it counted.
func TestFlowEndsKernel(t *testing.T) {
	k := openKernelWith(t, Options{PinDir: newPinDir(t), Flows: FlowOptions{ConntrackScan: 200 * time.Millisecond}})
	watch(t, k)
	a, b := newWorkload(t, "10.77.9.11"), newWorkload(t, "10.77.9.12")
	testutil.WaitFor(t, 5*time.Second, "both interfaces seen", func() bool {
		_, okA := k.mon.Ifindex(a.HostIface)
		_, okB := k.mon.Ifindex(b.HostIface)
		return okA && okB
	})
	for i, w := range []*testutil.Workload{a, b} {
		if err := applyKnown(t, k, allowAllEndpoint(w, i+1)); err != nil {
			t.Fatalf("apply %s: %v", w.HostIface, err)
		}
	}
	_, sub := k.ObserveFlows(time.Time{}, 0, true, 100)
	defer sub.Close()
	if _, err := a.Exec("ping", "-n", "-c3", "-i0.2", "-W1", b.IP); err != nil {
		t.Fatalf("ping: %v", err)
	}
	var end *model.FlowEvent
	deadline := time.After(15 * time.Second)
	for end == nil {
		select {
		case ev := <-sub.Events():
			if ev.End && ev.Iface == a.HostIface && ev.Direction == model.Egress && ev.Proto == 1 {
				end = &ev
			}
		case <-deadline:
			t.Fatal("no end event of the ping at a's egress within 15s")
		}
	}
	if !end.Allowed || end.EndReason != model.FlowEndExpired || !end.RuleFound || end.Rule.Policy != "allow" || end.Src.Addr().String() != a.IP ||
		end.Dst.Addr().String() != b.IP || end.Forward.Packets != 3 || end.Reply.Packets != 3 ||
		end.Forward.Bytes < 3*84 || end.Reply.Bytes < 3*84 || !end.Started.Before(end.Time) {
		t.Fatalf("end event %+v: want expired, 3 requests and 3 replies of at least 84 bytes, allowed by profile allow", end)
	}
	if st := k.FlowStats(); st.Ended == 0 {
		t.Errorf("stats %+v count no end", st)
	}
}

// TestClockCalibratedBeforeFirstScan: the programs read the calibrated
// clock within seconds of the start, not from the first conntrack scan
// (here an hour away): the calibration syncs follow each other until the
// tick is published.
func TestClockCalibratedBeforeFirstScan(t *testing.T) {
	k := openKernelWith(t, Options{PinDir: newPinDir(t), Flows: FlowOptions{ConntrackScan: time.Hour}})
	d := k.datapath()
	testutil.WaitFor(t, 10*time.Second, "the programs' clock tick published", func() bool { return clockPublished(d) })
}
