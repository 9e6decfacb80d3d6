package e2e

import (
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestSurvivalIPv6: IPv6 traffic between dual-stack workloads survives a
// dpd restart with no loss and the kernel state untouched, its policy
// (an IPv6 IP set) enforced before, during and after, and the restarted
// dpd's first apply writes nothing (the IPv6 routes, neighbours and
// sysctls it reads back are what it wants).
func TestSurvivalIPv6(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, b, c := NewDualStackWorkload(t, 31), NewDualStackWorkload(t, 32), NewDualStackWorkload(t, 33)
	a6, b6, c6 := a.InFamily(true), b.InFamily(true), c.InFamily(true)
	snap := messages(t, survivalScenario(a6, b6, c6))
	enforced := func(t *testing.T) {
		t.Helper()
		Expect(t, Allowed(Ping(a6, b6.IP)), Denied(Ping(c6, b6.IP)), Denied(Ping(a6, c6.IP)))
	}
	n := newNode(t)
	n.start()
	ctl := n.connectUp(t, snap, a, b, c)
	enforced(t)
	before := settledFingerprint(t, n.pin, a, b, c)
	tr := startTraffic(t, a6, b6, 300, 9150)
	n.stop()
	tr.waitRounds(t, 50)
	enforced(t)
	d := n.start()
	ctl.waitStreams(t, 2)
	requireZeroWrites(t, n, d)
	enforced(t)
	tr.requireNoLoss(t, "restart")
	if diff := diffFingerprints(before, fingerprint(t, n.pin, a, b, c), true); len(diff) > 0 {
		t.Errorf("the restart changed the kernel state: %v", diff)
	}
}
