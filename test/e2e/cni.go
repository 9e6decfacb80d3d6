package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// WireLikeCNI gives w's host side what a CNI plugin sets up before any
// controller knows the pod: proxy ARP (so the pod resolves 169.254.1.1) and
// a /32 route to the pod. Only for interfaces dpd has no endpoint for, to
// prove that fail-closed does not depend on a missing route; endpoints the
// controller describes are wired by dpd itself.
func WireLikeCNI(t testing.TB, w *Workload) {
	t.Helper()
	sysctl := filepath.Join("/proc/sys/net/ipv4/conf", w.HostIface, "proxy_arp")
	if err := os.WriteFile(sysctl, []byte("1"), 0o644); err != nil {
		t.Fatalf("enable proxy arp on %s: %v", w.HostIface, err)
	}
	t.Cleanup(func() {
		// Usually gone with the link already; a leftover route would
		// blackhole the address for the next test.
		_ = exec.Command("ip", "route", "del", w.IP+"/32", "dev", w.HostIface).Run()
	})
	testutil.Run(t, "ip", "route", "replace", w.IP+"/32", "dev", w.HostIface)
}

// NewForeignWorkload is NewWorkload with an interface prefix dpd does not
// watch, wired like a CNI would: the control for fail-closed tests.
func NewForeignWorkload(t testing.TB, prefix string, n int) *Workload {
	t.Helper()
	w := newWorkload(t, prefix, n)
	WireLikeCNI(t, w)
	return w
}

// ipOf is the suite's address of pod n.
func ipOf(n int) string { return fmt.Sprintf("%s%d", WorkloadSubnet, n) }
