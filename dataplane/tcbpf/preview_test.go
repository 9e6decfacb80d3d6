package tcbpf

import (
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// TestStagedPreview: the preview program's verdict is reported beside the
// real one and never enforced, in either direction of disagreement; off,
// or without a preview program, events carry no preview.
func TestStagedPreview(t *testing.T) {
	d := openTest(t, Options{})
	ifA, _ := vethPair(t)
	mustNil(t, d.SetIfState(ifA, 1, abi.IfReady))
	mustNil(t, d.InstallPolicy(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictAllow, 0xa1)))
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, verdictProg(t, d, abi.VerdictDeny, 0xd1)))
	mustNil(t, d.InstallPreview(1, abi.DirFromWEP, verdictProg(t, d, abi.VerdictDeny, 0xd2)))
	mustNil(t, d.InstallPreview(1, abi.DirToWEP, verdictProg(t, d, abi.VerdictAllow, 0xa2)))
	mustNil(t, d.EnsureCounters([]uint64{0xa1, 0xd1, 0xa2, 0xd2}))
	r := eventReader(t, d)
	one := func(what string) FlowEvent {
		t.Helper()
		evs := drain(t, r)
		if len(evs) != 1 {
			t.Fatalf("%s: %d events, want 1", what, len(evs))
		}
		return evs[0]
	}

	mustNil(t, d.SetEventsPreview(true, 0, true))
	if got := run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 5000, 53)); got != abi.TCActOK {
		t.Fatalf("allowed flow with a denying preview: %d, want pass", got)
	}
	ev := one("allowed, preview deny")
	if ev.Verdict != abi.VerdictAllow || ev.RuleId != 0xa1 || ev.PreviewVerdict != abi.VerdictDeny ||
		ev.PreviewRuleId != 0xd2 || ev.Flags&abi.StPreview != 0 {
		t.Fatalf("event %+v: want allow by a1, preview deny by d2", ev)
	}
	// The real verdict made the conntrack entry and counted its rule.
	if got := run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 5000, 53)); got != abi.TCActOK {
		t.Fatalf("second packet: %d", got)
	}
	if evs := drain(t, r); len(evs) != 0 {
		t.Fatalf("conntrack hit reported %+v", evs)
	}
	if p, _, err := d.ReadCounter(0xa1); err != nil || p != 1 {
		t.Fatalf("real rule counted %d (%v), want 1", p, err)
	}
	if p, _, _ := d.ReadCounter(0xd2); p != 0 {
		t.Fatalf("preview rule counted %d packets", p)
	}

	if got := run(t, d, abi.DirToWEP, ifA, udpPkt(ipB, ipA, 6000, 53)); got != abi.TCActShot {
		t.Fatalf("denied flow with an allowing preview: %d, want drop", got)
	}
	ev = one("denied, preview allow")
	if ev.Verdict != abi.VerdictDeny || ev.RuleId != 0xd1 || ev.PreviewVerdict != abi.VerdictAllow || ev.PreviewRuleId != 0xa2 {
		t.Fatalf("event %+v: want deny by d1, preview allow by a2", ev)
	}

	// Without a preview program, or with the preview off: no preview.
	mustNil(t, d.ClearPreview(1, abi.DirToWEP))
	run(t, d, abi.DirToWEP, ifA, udpPkt(ipB, ipA, 6001, 53))
	if ev := one("no preview program"); ev.Verdict != abi.VerdictDeny || ev.PreviewVerdict != abi.VerdictNone {
		t.Fatalf("event %+v: want deny without preview", ev)
	}
	mustNil(t, d.SetEventsPreview(true, time.Second, false))
	if got := run(t, d, abi.DirFromWEP, ifA, udpPkt(ipA, ipB, 5001, 53)); got != abi.TCActOK {
		t.Fatalf("preview off: %d", got)
	}
	if ev := one("preview off"); ev.Verdict != abi.VerdictAllow || ev.PreviewVerdict != abi.VerdictNone {
		t.Fatalf("event %+v: want allow without preview", ev)
	}
}
