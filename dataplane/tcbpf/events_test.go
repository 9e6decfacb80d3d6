package tcbpf

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// eventReader opens a reader on d's ring, closed with the test.
func eventReader(t *testing.T, d *Datapath) *EventReader {
	t.Helper()
	r, err := d.NewEventReader()
	mustNil(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// drain reads every event already in the ring (none is in flight: the
// test runs are synchronous, so a submitted record is readable).
func drain(t *testing.T, r *EventReader) []FlowEvent {
	t.Helper()
	var out []FlowEvent
	for {
		r.SetDeadline(time.Now())
		ev, err := r.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		mustNil(t, err)
		out = append(out, ev)
	}
}

func addr4(b [16]uint8) netip.Addr { return netip.AddrFrom4([4]byte(b[:4])) }

func TestEventsDeniedFlowRateLimited(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictDeny, 0xd1)))
	mustNil(t, d.SetEvents(true, time.Hour))
	r := eventReader(t, d)

	syn := tcpPkt(ipA, ipB, 40000, 80, tcpSYN)
	if got := run(t, d, abi.DirFromWEP, ifA, syn); got != abi.TCActShot {
		t.Fatalf("denied SYN: %d", got)
	}
	evs := drain(t, r)
	if len(evs) != 1 {
		t.Fatalf("%d events for a new denied flow, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Kind != abi.EvDecided || ev.Verdict != abi.VerdictDeny || ev.RuleId != 0xd1 ||
		addr4(ev.Saddr) != ipA || addr4(ev.Daddr) != ipB || ev.Sport != 40000 || ev.Dport != 80 ||
		ev.Proto != 6 || ev.Family != 4 || ev.Dir != abi.DirFromWEP || ev.Ifindex != uint32(ifA) ||
		ev.Suppressed != 0 || ev.TsNs == 0 || ev.Flags&abi.StTCPSyn == 0 {
		t.Fatalf("event %+v", ev)
	}

	// Retransmits inside the interval are counted, not reported; another
	// flow is reported at once.
	for range 5 {
		if got := run(t, d, abi.DirFromWEP, ifA, syn); got != abi.TCActShot {
			t.Fatalf("denied retransmit: %d", got)
		}
	}
	run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40001, 80, tcpSYN))
	evs = drain(t, r)
	if len(evs) != 1 || evs[0].Sport != 40001 {
		t.Fatalf("events after 5 retransmits and a new flow: %+v, want the new flow's only", evs)
	}

	// Past the interval (0: always past), the next packet reports the flow
	// with the count.
	mustNil(t, d.SetEvents(true, 0))
	run(t, d, abi.DirFromWEP, ifA, syn)
	evs = drain(t, r)
	if len(evs) != 1 || evs[0].Sport != 40000 || evs[0].Suppressed != 5 {
		t.Fatalf("events past the interval: %+v, want one with 5 suppressed", evs)
	}
	if n, err := d.EventDrops(); err != nil || n != 0 {
		t.Fatalf("drops %d %v", n, err)
	}
}

func TestEventsEstablishedFlowWritesNothing(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0xa1)))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, verdictProg(t, d, abi.VerdictDeny, 0xd2)))
	mustNil(t, d.SetEvents(true, 0))
	r := eventReader(t, d)

	if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40000, 80, tcpSYN)); got != abi.TCActOK {
		t.Fatalf("allowed SYN: %d", got)
	}
	evs := drain(t, r)
	if len(evs) != 1 || evs[0].Verdict != abi.VerdictAllow || evs[0].RuleId != 0xa1 {
		t.Fatalf("events of a new allowed flow: %+v, want one allow by 0xa1", evs)
	}
	for range 10 {
		if got := run(t, d, abi.DirFromWEP, ifA, tcpPkt(ipA, ipB, 40000, 80, tcpACK)); got != abi.TCActOK {
			t.Fatalf("established: %d", got)
		}
		if got := run(t, d, abi.DirToWEP, ifA, tcpPkt(ipB, ipA, 80, 40000, tcpACK)); got != abi.TCActOK {
			t.Fatalf("reply: %d", got)
		}
	}
	if evs := drain(t, r); len(evs) != 0 {
		t.Fatalf("established and reply packets wrote %d events: %+v", len(evs), evs)
	}
}

func TestEventsNoPolicyAndOff(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady))
	r := eventReader(t, d)

	// Off (the state after Open): nothing is written.
	run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 1000, 53))
	if evs := drain(t, r); len(evs) != 0 {
		t.Fatalf("events while off: %+v", evs)
	}
	mustNil(t, d.SetEvents(true, time.Hour))
	run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 1001, 53))
	run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 1001, 53))
	evs := drain(t, r)
	if len(evs) != 1 || evs[0].Kind != abi.EvNoPolicy || evs[0].Verdict != abi.VerdictNone || evs[0].Sport != 1001 {
		t.Fatalf("no-policy events: %+v, want one (rate-limited)", evs)
	}
}

// TestEventsFullRingDropsEventsNotPackets fills a one-page ring: the
// packets keep their verdicts, the events that did not fit are counted.
func TestEventsFullRingDropsEventsNotPackets(t *testing.T) {
	page := os.Getpagesize()
	d := openTest(t, Options{Sizes: MapSizes{Conntrack: 1024, IPSets: 1024, IfState: 64, RuleCounters: 256,
		Chain: 64, Events: page}})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0xa1)))
	mustNil(t, d.SetEvents(true, 0))
	r := eventReader(t, d)

	const flows = 200 // a page holds page / (8 + abi.FlowEventLen) records
	for i := range flows {
		if got := run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, uint16(2000+i), 53)); got != abi.TCActOK {
			t.Fatalf("flow %d with a full ring: %d, want pass", i, got)
		}
	}
	evs := drain(t, r)
	drops, err := d.EventDrops()
	mustNil(t, err)
	if want := page / (8 + abi.FlowEventLen); len(evs) != want {
		t.Fatalf("%d events in a %d-byte ring, want %d", len(evs), page, want)
	}
	if int(drops)+len(evs) != flows {
		t.Fatalf("%d read + %d dropped, want %d", len(evs), drops, flows)
	}
	// Read, the ring takes events again.
	run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 9999, 53))
	if evs := drain(t, r); len(evs) != 1 || evs[0].Sport != 9999 {
		t.Fatalf("after draining: %+v", evs)
	}
}

// TestEventsServiceFlowNamesFrontend: a new connection to a service
// frontend reports the backend it was policed with and the frontend the
// client addressed.
func TestEventsServiceFlowNamesFrontend(t *testing.T) {
	e := newNATEnv(t)
	mustNil(t, e.d.ProgramNATPort(7, []NATFrontend{e.fe}, []NATBackend{beB}, 0))
	mustNil(t, e.d.SetEvents(true, time.Second))
	r := eventReader(t, e.d)
	client := netip.AddrPortFrom(ipA, 40000)
	if ret, _ := e.from(t, csumPkt(6, client, feAddr, tcpSYN, false)); ret != abi.TCActOK {
		t.Fatalf("SYN to frontend: %d", ret)
	}
	evs := drain(t, r)
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	ev := evs[0]
	fe := netip.AddrPortFrom(addr4(ev.NatAddr), ev.NatPort)
	if ev.Flags&abi.StNAT == 0 || fe != feAddr || ev.NatSvc != 7 ||
		addr4(ev.Daddr) != beB.Addr || ev.Dport != beB.Port || addr4(ev.Saddr) != ipA {
		t.Fatalf("service flow event %+v: frontend %s, want %s -> backend %s:%d", ev, fe, feAddr, beB.Addr, beB.Port)
	}
}

// TestEventsDeniedSlotShared: with one rate-limit slot every denied flow
// shares it. A flow holding it with packets still to report keeps it, and
// the other flows are reported on every packet, so no count is lost; once
// nothing is pending, the next flow takes the slot over.
func TestEventsDeniedSlotShared(t *testing.T) {
	d := openTest(t, Options{Sizes: MapSizes{EventDeny: 1}})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictDeny, 0xd1)))
	mustNil(t, d.SetEvents(true, time.Hour))
	r := eventReader(t, d)
	a, b := udpPkt(ipA, ipB, 1000, 53), udpPkt(ipA, ipB, 1001, 53)
	sports := func(evs []FlowEvent) (out []uint16) {
		for _, ev := range evs {
			out = append(out, ev.Sport)
		}
		return out
	}
	for _, f := range [][]byte{a, a, a, b, b} {
		run(t, d, abi.DirFromWEP, ifA, f)
	}
	// a: reported, then 2 counted; b: reported twice (the slot is a's).
	if got := sports(drain(t, r)); len(got) != 3 || got[0] != 1000 || got[1] != 1001 || got[2] != 1001 {
		t.Fatalf("events from flows %v, want 1000 1001 1001", got)
	}
	mustNil(t, d.SetEvents(true, 0))
	run(t, d, abi.DirFromWEP, ifA, a)
	evs := drain(t, r)
	if len(evs) != 1 || evs[0].Sport != 1000 || evs[0].Suppressed != 2 {
		t.Fatalf("a past the interval: %+v, want its event with 2 suppressed", evs)
	}
	// Nothing pending: b takes the slot and is rate-limited from now on.
	mustNil(t, d.SetEvents(true, time.Hour))
	for range 3 {
		run(t, d, abi.DirFromWEP, ifA, b)
	}
	if got := sports(drain(t, r)); len(got) != 1 || got[0] != 1001 {
		t.Fatalf("events from flows %v, want b's once", got)
	}
}
