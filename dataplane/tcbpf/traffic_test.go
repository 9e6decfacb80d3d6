package tcbpf

import (
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// setSysctl writes a /proc/sys value and restores the old one at cleanup.
func setSysctl(t *testing.T, path, val string) {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(val), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(path, old, 0o644) })
}

// routedWorkload wires a workload the way the composition layer does:
// /32 route via the host veth, proxy ARP answering for 169.254.1.1.
func routedWorkload(t *testing.T, ip string) (*testutil.Workload, int) {
	t.Helper()
	w := testutil.NewWorkload(t, "dpp", ip)
	testutil.Run(t, "ip", "route", "add", ip+"/32", "dev", w.HostIface)
	setSysctl(t, "/proc/sys/net/ipv4/conf/"+w.HostIface+"/proxy_arp", "1")
	l, err := netlink.LinkByName(w.HostIface)
	mustNil(t, err)
	return w, l.Attrs().Index
}

func ping(w *testutil.Workload, ip string) error {
	_, err := w.Exec("ping", "-c", "1", "-W", "1", ip)
	return err
}

func TestRealTraffic(t *testing.T) {
	testutil.RequirePrivileged(t)
	setSysctl(t, "/proc/sys/net/ipv4/ip_forward", "1")
	for _, legacy := range []bool{false, true} {
		name := "tcx"
		if legacy {
			name = "legacy tc"
		}
		t.Run(name, func(t *testing.T) { realTraffic(t, legacy) })
	}
}

func realTraffic(t *testing.T, legacy bool) {
	d := openTest(t, Options{ForceLegacyTC: legacy})
	wa, ifA := routedWorkload(t, "10.67.0.1")
	wb, ifB := routedWorkload(t, "10.67.0.2")
	allow := verdictProg(t, d, abi.VerdictAllow, 1)
	deny := verdictProg(t, d, abi.VerdictDeny, 2)
	mustNil(t, d.EnsureCounters([]uint64{1, 2}))
	for i, w := range []struct {
		ifindex int
		name    string
	}{{ifA, wa.HostIface}, {ifB, wb.HostIface}} {
		if _, err := d.Attach(w.ifindex, w.name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Detach(w.ifindex, w.name) })
		mustNil(t, d.InstallPolicy(uint32(i), abi.DirFromWEP, allow))
		mustNil(t, d.InstallPolicy(uint32(i), abi.DirToWEP, allow))
	}
	flush := func() {
		t.Helper()
		_, err := d.ScanConntrack(time.Now().Add(2 * time.Hour))
		mustNil(t, err)
	}

	// Attached but not ready: nothing passes (fail closed).
	if err := ping(wa, wb.IP); err == nil {
		t.Fatal("ping passed before ifstate was ready")
	}
	mustNil(t, d.SetIfState(ifA, 0, abi.IfReady|abi.IfWorkload))
	mustNil(t, d.SetIfState(ifB, 1, abi.IfReady|abi.IfWorkload))
	testutil.WaitFor(t, 10*time.Second, "ping A->B with allow policies", func() bool {
		return ping(wa, wb.IP) == nil
	})
	if n, _ := d.CountConntrack(); n == 0 {
		t.Fatal("allowed ping left no conntrack entries")
	}
	if p, _, err := d.ReadCounter(1); err != nil || p == 0 {
		t.Fatalf("allow rule counted %d packets (%v)", p, err)
	}

	// B's ingress denies: A's echo requests stop at B's veth.
	flush()
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, deny))
	if err := ping(wa, wb.IP); err == nil {
		t.Fatal("ping passed B's deny ingress policy")
	}
	if p, _, _ := d.ReadCounter(2); p == 0 {
		t.Fatal("deny rule counted nothing")
	}
	// B -> A still works although B's ingress denies: the reply of B's
	// allowed egress flow is let in by conntrack.
	testutil.WaitFor(t, 10*time.Second, "ping B->A with B's ingress denying", func() bool {
		return ping(wb, wa.IP) == nil
	})

	// Without ifstate, B's veth drops everything again.
	flush()
	mustNil(t, d.InstallPolicy(1, abi.DirToWEP, allow))
	testutil.WaitFor(t, 10*time.Second, "ping A->B allowed again", func() bool {
		return ping(wa, wb.IP) == nil
	})
	flush()
	mustNil(t, d.DeleteIfState(ifB))
	if err := ping(wa, wb.IP); err == nil {
		t.Fatal("ping passed an interface without ifstate")
	}
}
