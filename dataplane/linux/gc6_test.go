package linux

import (
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// dualEndpoint is allowAllEndpoint for a dual-stack w with IPv6 address
// ip6, with w's MAC (so its neighbour entries are pinned).
func dualEndpoint(t *testing.T, w *testutil.Workload, n int, ip6 string) *model.Endpoint {
	t.Helper()
	ep := allowAllEndpoint(w, n)
	ep.IPv6Nets = []netip.Prefix{netip.MustParsePrefix(ip6 + "/128")}
	var links []struct {
		Address string `json:"address"`
	}
	out := testutil.Run(t, "ip", "-n", w.NS, "-j", "link", "show", "eth0")
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		t.Fatalf("eth0 of %s: %v (%q)", w.NS, err, out)
	}
	mac, err := net.ParseMAC(links[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	ep.MAC = mac
	return ep
}

// TestRestartCollectsIPv6: an endpoint a restarted dpd's controller no
// longer sends loses its IPv6 route and neighbour at the first collection
// as it loses its IPv4 ones, while a live dual-stack endpoint keeps both
// families and its IPv6 traffic.
func TestRestartCollectsIPv6(t *testing.T) {
	pin := newPinDir(t)
	k1 := openKernel(t, pin)
	if !k1.cfg.IPv6() {
		testutil.CannotRun(t, "IPv6 test", "this host has no IPv6")
	}
	a, c := newWorkload(t, "10.77.6.1"), newWorkload(t, "10.77.6.3")
	a6, c6 := "fd00:77:6::1", "fd00:77:6::3"
	testutil.AddIPv6(t, a, "", a6)
	testutil.AddIPv6(t, c, "", c6)
	epA, epC := dualEndpoint(t, a, 1, a6), dualEndpoint(t, c, 3, c6)
	mustApply(t, k1, epA, epC)
	show := func(args ...string) string {
		return strings.TrimSpace(testutil.Run(t, "ip", append([]string{"-6"}, args...)...))
	}
	if r := show("route", "show", c6); !strings.Contains(r, "dev "+c.HostIface) || !strings.Contains(r, "proto 221") {
		t.Fatalf("c's IPv6 route: %q", r)
	}
	if n := show("neigh", "show", c6, "dev", c.HostIface); !strings.Contains(n, "PERMANENT") {
		t.Fatalf("c's IPv6 neighbour: %q", n)
	}
	testutil.WaitFor(t, 10*time.Second, "a pings c over IPv6", func() bool { return pingsQuick(a, c6) })
	mustNil(t, k1.Close())

	k2 := openKernel(t, pin)
	mustApply(t, k2, epA)
	if r := show("route", "show", c6); r != "" {
		t.Errorf("c's IPv6 route left after collection: %q", r)
	}
	if r := testutil.Run(t, "ip", "route", "show", c.IP); strings.TrimSpace(r) != "" {
		t.Errorf("c's IPv4 route left after collection: %q", r)
	}
	if n := show("neigh", "show", c6, "dev", c.HostIface); strings.Contains(n, "PERMANENT") {
		t.Errorf("c's IPv6 neighbour left after collection: %q", n)
	}
	if r := show("route", "show", a6); !strings.Contains(r, "dev "+a.HostIface) {
		t.Errorf("a's IPv6 route went: %q", r)
	}
	if pingsQuick(a, c6) {
		t.Error("a reaches c over IPv6 after c's endpoint was collected")
	}
}
