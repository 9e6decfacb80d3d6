package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// WorkloadSubnet6 is the IPv6 prefix of the suite's dual-stack workloads
// ("fd00:65::"); DPD_E2E_SUBNET6 moves them, like DPD_E2E_SUBNET.
var WorkloadSubnet6 = func() string {
	if s := os.Getenv("DPD_E2E_SUBNET6"); s != "" {
		return strings.TrimSuffix(s, ":") + ":"
	}
	return "fd00:65::"
}()

// ip6Of is the suite's IPv6 address of pod n.
func ip6Of(n int) string { return WorkloadSubnet6 + strconv.Itoa(n) }

// NewDualStackWorkload is NewWorkload with an IPv6 address too
// (fd00:65::n/128), wired like Calico's CNI plugin: the host side's MAC is
// ee:ee:ee:ee:ee:ee and the pod's IPv6 default route is via that side's
// link-local address, fe80::ecee:eeff:feee:eeee. Routes, neighbours and
// the IPv6 sysctls of the host side are dpd's to program.
func NewDualStackWorkload(t testing.TB, n int) *Workload {
	t.Helper()
	if r, err := RouteTo(ip6Of(n)); err != nil || r != "" {
		t.Fatalf("%s is already routed (%q, %v): something else on this host uses it; "+
			"stop it or set DPD_E2E_SUBNET6", ip6Of(n), r, err)
	}
	w := NewWorkload(t, n)
	testutil.AddIPv6(t, w.Workload, "", ip6Of(n))
	w.IP6 = ip6Of(n)
	return w
}

// InFamily is w as probes of one family see it: the same pod, with IP its
// IPv6 address when v6 (its IPv4 one otherwise). Endpoint still describes
// both addresses.
func (w *Workload) InFamily(v6 bool) *Workload {
	v := *w
	tw := *w.Workload
	tw.IP = w.IP4
	if v6 {
		tw.IP = w.IP6
	}
	v.Workload = &tw
	return &v
}

// hostNet is ip as a host prefix of its family.
func hostNet(ip string) string {
	if strings.Contains(ip, ":") {
		return ip + "/128"
	}
	return ip + "/32"
}
