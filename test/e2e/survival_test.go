package e2e

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/linux"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// The survival tests prove that enforcement survives the daemon's own
// lifecycle: traffic between two workloads, a 100 pps ping and an open TCP connection exchanging data every 10 ms,
// loses nothing when dpd is killed, restarted or its controller
// reconnects; what the controller no longer sends goes, exactly; a new
// interface passes nothing until programmed; a crash mid-apply leaves no
// orphan behind.

// Survival scenario: A may reach B (B's ingress admits the clients set,
// A's address, through tier t1); C admits nothing; everything allows out.
const (
	survClients = "s:surv-clients"
	survExtra   = "s:surv-extra"
	profOpen    = "surv-open"
	profClosed  = "surv-closed"
	polFromCl   = "t1.from-clients"
)

func survivalScenario(a, b *Workload, others ...*Workload) Scenario {
	s := Scenario{
		IPSet(survClients, felix.IPSetUpdate_IP, a.IP),
		Profile(profOpen, Rules(Allow()), Rules(Allow())),
		Profile(profClosed, nil, Rules(Allow())),
		Policy("t1", polFromCl, Rules(Allow(SrcIPSets(survClients))), nil),
		Endpoint(a, []string{profOpen}),
		Endpoint(b, []string{profOpen}, Tier("t1", "", []string{polFromCl}, nil)),
	}
	for _, w := range others {
		s = append(s, Endpoint(w, []string{profClosed}))
	}
	return s
}

func messages(t *testing.T, s Scenario) []*felix.ToDataplane {
	t.Helper()
	msgs, err := s.Messages(nil)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// traffic is the ping and the TCP exchange from A to B.
type traffic struct {
	ping *testutil.PingRun
	tcp  *tcpStream
}

func startTraffic(t *testing.T, a, b *Workload, pings, port int) *traffic {
	t.Helper()
	tr := &traffic{ping: a.StartPing(b.IP, pings), tcp: startTCP(t, a, b, port)}
	tr.waitRounds(t, 20) // both are flowing before the event
	return tr
}

// waitRounds waits until n more TCP rounds have completed: traffic flowed
// meanwhile.
func (tr *traffic) waitRounds(t *testing.T, n int64) {
	t.Helper()
	target := tr.tcp.completed.Load() + n
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%d more TCP rounds", n), func() bool {
		return tr.tcp.completed.Load() >= target || tr.tcp.failed.Load()
	})
}

// requireNoLoss waits for the ping to end, stops the TCP exchange and fails
// t unless nothing was lost.
func (tr *traffic) requireNoLoss(t *testing.T, event string) {
	t.Helper()
	sent, recv := tr.ping.Wait(t, 3*time.Minute)
	r := tr.tcp.stop()
	t.Logf("%s: ping %d sent, %d received, %d lost; tcp %d rounds, max rtt %s, retransmits %d/%d",
		event, sent, recv, sent-recv, r.Rounds, r.MaxRTT.Round(time.Microsecond), r.ClientRetrans, r.SrvRetrans)
	if sent == 0 || recv != sent {
		t.Errorf("%s: ping lost %d of %d packets", event, sent-recv, sent)
	}
	if r.Err != nil {
		t.Errorf("%s: TCP connection broke: %v", event, r.Err)
	}
	if r.ClientRetrans != 0 || r.SrvRetrans != 0 {
		t.Errorf("%s: TCP retransmitted (client %d, server %d): segments were lost", event, r.ClientRetrans, r.SrvRetrans)
	}
}

// requireZeroWrites checks the kernel's report of d's first apply after
// InSync: nothing loaded, installed, attached or written, nothing collected.
func requireZeroWrites(t *testing.T, n *node, d *Daemon) map[string]string {
	t.Helper()
	f, ok := n.firstApply(d)
	if !ok {
		t.Fatalf("no first-apply report in the dpd log")
	}
	for _, k := range []string{"program_loads", "jump_writes", "ifstate_writes", "attaches", "netlink_writes", "garbage_collected"} {
		if f[k] != "0" {
			t.Errorf("first apply after the restart: %s=%s, want 0 (%v)", k, f[k], f)
		}
	}
	return f
}

// TestSurvival: traffic from A to B survives each event with no loss and
// with the kernel state untouched (same programs attached, same policy
// programs in dpd_jump, same ifstate), and policy is enforced before,
// during and after.
func TestSurvival(t *testing.T) {
	testutil.RequirePrivileged(t)
	// C and D have the same profile: one policy group, one shared slot,
	// adopted across the restart like the others.
	a, b, c, d := NewWorkload(t, 1), NewWorkload(t, 2), NewWorkload(t, 3), NewWorkload(t, 4)
	snap := messages(t, survivalScenario(a, b, c, d))
	enforced := func(t *testing.T) {
		t.Helper()
		Expect(t, Allowed(Ping(a, b.IP)), Denied(Ping(c, b.IP)), Denied(Ping(a, c.IP)), Denied(Ping(a, d.IP)))
	}
	cases := []struct {
		name  string
		event func(t *testing.T, n *node, ctl *controller, tr *traffic)
	}{
		{"kill-9", func(t *testing.T, n *node, ctl *controller, tr *traffic) {
			n.kill9()
			tr.waitRounds(t, 50) // half a second with no dpd at all
			enforced(t)          // and policy still holds without it
			start := time.Now()
			d := n.start()
			ctl.waitStreams(t, 2) // the controller reconnected and replayed
			t.Logf("kill -9: restart to DataplaneInSync %s", time.Since(start).Round(time.Millisecond))
			f := requireZeroWrites(t, n, d)
			t.Logf("kill -9: first apply %v", f)
		}},
		{"restart", func(t *testing.T, n *node, ctl *controller, tr *traffic) {
			n.stop()
			tr.waitRounds(t, 50)
			enforced(t)
			start := time.Now()
			d := n.start()
			ctl.waitStreams(t, 2)
			t.Logf("restart: restart to DataplaneInSync %s", time.Since(start).Round(time.Millisecond))
			f := requireZeroWrites(t, n, d)
			t.Logf("restart: first apply %v", f)
		}},
		{"controller-reconnect", func(t *testing.T, n *node, ctl *controller, tr *traffic) {
			ctl.close()
			tr.waitRounds(t, 50) // the controller is gone: enforcement stays
			enforced(t)
			start := time.Now()
			n.connectUp(t, snap, a, b, c, d)
			t.Logf("controller reconnect: to DataplaneInSync %s", time.Since(start).Round(time.Millisecond))
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			n.start()
			ctl := n.connectUp(t, snap, a, b, c, d)
			enforced(t)
			before := settledFingerprint(t, n.pin, a, b, c, d)

			tr := startTraffic(t, a, b, 500, 9100+i)
			tc.event(t, n, ctl, tr)
			enforced(t)
			tr.requireNoLoss(t, tc.name)
			if diff := diffFingerprints(before, fingerprint(t, n.pin, a, b, c, d), true); len(diff) > 0 {
				t.Errorf("%s changed the kernel state: %v", tc.name, diff)
			}
		})
	}
}

// TestSurvivalSnapshotMissingEndpoint: dpd restarts and the controller's
// snapshot no longer has C. C's endpoint goes as a removal does (route,
// jump slots, pinned policy programs), without a detach: C's interface,
// which still exists, keeps only dpd's entry programs, not ready, and
// drops; A's traffic to B flows on untouched.
func TestSurvivalSnapshotMissingEndpoint(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, b, c := NewWorkload(t, 1), NewWorkload(t, 2), NewWorkload(t, 3)
	n := newNode(t)
	n.start()
	ctl := n.connectUp(t, messages(t, survivalScenario(a, b, c)), a, b, c)
	before := settledFingerprint(t, n.pin, a, b)
	if left := leftovers(Observe(n.pin, c)); len(left) < 4 {
		t.Fatalf("C is not fully programmed before the test: has only %v", left)
	}
	progsBefore, _ := os.ReadDir(filepath.Join(n.pin, "progs"))

	tr := startTraffic(t, a, b, 400, 9200)
	ctl.close()
	n.stop()
	n.start()
	n.connectUp(t, messages(t, survivalScenario(a, b)), a, b)

	var wrong []string
	testutil.WaitFor(t, cleanupTimeout, "C's endpoint to go and its interface to fail closed", func() bool {
		wrong = notFailedClosed(Observe(n.pin, c))
		return len(wrong) == 0
	})
	Expect(t, Denied(Ping(c, a.IP)), Denied(Ping(c, b.IP)))
	tr.requireNoLoss(t, "restart without C")
	// What is left of dpd_jump and dpd_ifstate is as it was, and A's and
	// B's programs are the same ones.
	after := fingerprint(t, n.pin, a, b)
	delete(after, "dpd_ifstate "+ifstateKey(c)) // C's own, failed closed (checked above)
	if diff := diffFingerprints(before, after, false); len(diff) > 0 {
		t.Errorf("A's and B's state changed: %v", diff)
	}
	// C's two programs (its closed profile in each direction) are the ones
	// no one else runs.
	progsAfter, _ := os.ReadDir(filepath.Join(n.pin, "progs"))
	if len(progsBefore) != 5 || len(progsAfter) != 3 {
		t.Errorf("pinned policy programs: %d before, %d after; want 5 and 3 (C's own two gone)", len(progsBefore), len(progsAfter))
	}
	Expect(t, Allowed(Ping(a, b.IP)), Allowed(Ping(b, a.IP)))
}

// TestSurvivalFailClosed: an interface created before its endpoint message
// passes nothing until programmed, also when it appears while dpd is down
// and dpd comes back without a controller yet; programmed, it passes.
func TestSurvivalFailClosed(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, b := NewWorkload(t, 1), NewWorkload(t, 2)
	n := newNode(t)
	n.start()
	ctl := n.connectUp(t, messages(t, survivalScenario(a, b)), a, b)

	early := NewWorkload(t, 4)
	WireLikeCNI(t, early)
	Expect(t, Denied(Ping(early, a.IP)), Denied(Ping(a, early.IP)))

	// dpd goes away; an interface appears meanwhile (nothing can police it
	// while no dpd runs); dpd comes back with no controller yet.
	ctl.close()
	n.kill9()
	late := NewWorkload(t, 5)
	WireLikeCNI(t, late)
	n.start()
	Expect(t,
		Allowed(Ping(a, b.IP)),
		Denied(Ping(late, a.IP)), Denied(Ping(a, late.IP)),
		Denied(Ping(early, a.IP)),
	)

	// The controller describes both: they pass.
	s := append(survivalScenario(a, b), Endpoint(early, []string{profOpen}), Endpoint(late, []string{profOpen}))
	n.connectUp(t, messages(t, s), a, b, early, late)
	Expect(t, Allowed(Ping(early, a.IP)), Allowed(Ping(late, a.IP)), Allowed(Ping(a, late.IP)))
}

// TestSurvivalCrashMidApply: a dpd that dies between attaching an
// endpoint's programs and installing its policy (the test hook) leaves
// nothing behind once the next dpd has the controller's snapshot: every
// ifstate entry, link pin, pinned program, jump slot and IP set belongs to
// a live endpoint, or to the interface of one the snapshot dropped (C,
// which stays failed closed). A's traffic to B loses nothing throughout.
func TestSurvivalCrashMidApply(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, b, c := NewWorkload(t, 1), NewWorkload(t, 2), NewWorkload(t, 3)
	n := newNode(t)
	n.start()
	ctl := n.connectUp(t, messages(t, survivalScenario(a, b, c)), a, b, c)
	tr := startTraffic(t, a, b, 800, 9300)
	ctl.close()
	n.stop()

	// The next dpd gets a changed snapshot (a new endpoint E, a new set B
	// now also admits) and crashes right after its first attach.
	e := NewWorkload(t, 5)
	changed := append(survivalScenario(a, b, c), Endpoint(e, []string{profOpen}), IPSet(survExtra, felix.IPSetUpdate_IP, e.IP))
	for i, m := range changed {
		if m.GetActivePolicyUpdate() != nil {
			changed[i] = Policy("t1", polFromCl, Rules(Allow(SrcIPSets(survClients)), Allow(SrcIPSets(survExtra))), nil)
		}
	}
	n.start(linux.CrashAfterAttachEnv + "=1")
	crashing := n.connect(messages(t, changed))
	n.waitExit(linux.CrashExitCode, 30*time.Second)
	crashing.close()

	// The dpd after it gets the final snapshot: A, B and E; C and the new
	// set are gone.
	final := append(survivalScenario(a, b), Endpoint(e, []string{profOpen}))
	d := n.start()
	n.connectUp(t, messages(t, final), a, b, e)
	tr.requireNoLoss(t, "crash mid-apply and restart")
	if f, ok := n.firstApply(d); ok {
		t.Logf("first apply after the crash: %v", f)
	}

	live := []*Workload{a, b, e}
	var orphans []string
	testutil.WaitFor(t, cleanupTimeout, "no orphans", func() bool {
		orphans = findOrphans(t, n.pin, live, c)
		if len(orphans) > 0 {
			t.Logf("orphans: %v", orphans)
		}
		return len(orphans) == 0
	})
	Expect(t, Allowed(Ping(a, b.IP)), Allowed(Ping(a, e.IP)), Denied(Ping(e, b.IP)))
}

// findOrphans lists what in the pinned state belongs to no live workload.
// The interfaces of gone workloads still exist: each must be failed closed
// (dpd's entry programs only, not ready), which is all of theirs there is.
func findOrphans(t *testing.T, pin string, live []*Workload, gone ...*Workload) []string {
	t.Helper()
	var out []string
	want := map[string]bool{}
	ours := map[string]bool{}
	for _, w := range append(append([]*Workload(nil), live...), gone...) {
		want[ifstateKey(w)] = true
		ours[w.HostIface+"_ingress"], ours[w.HostIface+"_egress"] = true, true
	}
	ifs, err := mapKeys(pin, "dpd_ifstate")
	if err != nil {
		t.Fatal(err)
	}
	for k := range ifs {
		if !want[k] {
			out = append(out, "ifstate entry "+k)
		}
	}
	if len(ifs) != len(live)+len(gone) {
		out = append(out, fmt.Sprintf("%d ifstate entries for %d live endpoints and %d failed-closed interfaces", len(ifs), len(live), len(gone)))
	}
	pins, _ := filepath.Glob(filepath.Join(pin, "links", "*"))
	for _, p := range pins {
		if !ours[filepath.Base(p)] {
			out = append(out, "link pin "+p)
		}
	}
	for _, w := range gone {
		if wrong := notFailedClosed(Observe(pin, w)); len(wrong) > 0 {
			out = append(out, fmt.Sprintf("%s: %v", w.Pod, wrong))
		}
	}
	jump, err := mapKeys(pin, "dpd_jump")
	if err != nil {
		t.Fatal(err)
	}
	// Endpoints of one policy group share a slot (A and E: the same
	// profile), so 2 per slot the live endpoints' ifstate entries name.
	slots := map[string]bool{}
	for _, w := range live {
		if v := ifs[ifstateKey(w)]; len(v) >= 8 {
			slots[v[:8]] = true
		}
	}
	if len(jump) != 3+2*len(slots) {
		out = append(out, fmt.Sprintf("dpd_jump has %d entries, want the epilogue, the 2 host entry continuations and 2 per slot of the live endpoints (%d)", len(jump), len(slots)))
	}
	chain, err := mapKeys(pin, "dpd_chain")
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 0 {
		out = append(out, fmt.Sprintf("dpd_chain entries %v (no policy here is split)", keysOf(chain)))
	}
	sets, err := mapKeys(pin, "dpd_ipset_ids")
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 1 {
		out = append(out, fmt.Sprintf("%d IP sets, want only %s", len(sets), survClients))
	}
	progs, _ := os.ReadDir(filepath.Join(pin, "progs"))
	// open/in (A, E), open/out (A, B, E), B's tier policy in.
	if len(progs) != 3 {
		var names []string
		for _, p := range progs {
			names = append(names, p.Name())
		}
		out = append(out, fmt.Sprintf("pinned programs %v, want 3", names))
	}
	return out
}

// ifstateKey is w's dpd_ifstate key as mapKeys spells it.
func ifstateKey(w *Workload) string {
	var k [4]byte
	binary.NativeEndian.PutUint32(k[:], uint32(w.Ifindex))
	return hex.EncodeToString(k[:])
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
