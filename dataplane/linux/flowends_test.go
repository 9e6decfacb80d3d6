package linux

import (
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
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
	if a := ctAddr(six); a != netip.MustParseAddr("fd00::5") {
		t.Fatalf("ctAddr(fd00::5) = %v", a)
	}
}
