package testutil

import "testing"

// Calico's CNI plugin gives every workload's host-side veth this MAC, so the
// host side's link-local address, which the kernel derives from it (EUI-64),
// is the same on every interface: the workload's IPv6 default gateway.
const (
	HostVethMAC = "ee:ee:ee:ee:ee:ee"
	GatewayV6   = "fe80::ecee:eeff:feee:eeee"
)

// AddIPv6 makes w dual-stack the way Calico's CNI plugin wires an IPv6
// address: ip6/128 on eth0 (without duplicate address detection, which
// would hold it tentative for a second), a default route via GatewayV6 on
// eth0, and the host side's MAC set to HostVethMAC (the link is cycled
// down and up in ns, "" for the current namespace, so the kernel derives
// the link-local address from the new MAC). The host side's IPv6 sysctls
// (disable_ipv6, forwarding, proxy_ndp) are left to the code under test.
func AddIPv6(t testing.TB, w *Workload, hostNS, ip6 string) {
	t.Helper()
	host := func(args ...string) {
		t.Helper()
		if hostNS != "" {
			args = append([]string{"-n", hostNS}, args...)
		}
		Run(t, "ip", args...)
	}
	host("link", "set", w.HostIface, "down")
	host("link", "set", w.HostIface, "address", HostVethMAC)
	host("link", "set", w.HostIface, "up")
	Run(t, "ip", "-n", w.NS, "-6", "addr", "add", ip6+"/128", "dev", "eth0", "nodad")
	Run(t, "ip", "-n", w.NS, "-6", "route", "add", "default", "via", GatewayV6, "dev", "eth0")
}
