package testutil

import (
	"os"
	"testing"
)

// Calico's CNI plugin gives every workload's host-side veth this MAC, so the
// host side's link-local address, which the kernel derives from it (EUI-64),
// is the same on every interface: the workload's IPv6 default gateway.
const (
	HostVethMAC = "ee:ee:ee:ee:ee:ee"
	GatewayV6   = "fe80::ecee:eeff:feee:eeee"
)

// AddIPv6 makes w dual-stack the way Calico's CNI plugin wires an IPv6
// address: IPv6 on at both ends (NewWorkload leaves it off), ip6/128 on
// eth0 (without duplicate address detection, which would hold it
// tentative for a second, as it would eth0's link-local address), a
// default route via GatewayV6 on eth0, and the host side's MAC set to
// HostVethMAC (the link is cycled down and up in hostNS, "" for the
// current namespace, so the kernel derives the link-local address from
// the new MAC). The host side's other IPv6 sysctls (forwarding,
// proxy_ndp) are left to the code under test; a test of its disable_ipv6
// write sets it to 1 after AddIPv6.
func AddIPv6(t testing.TB, w *Workload, hostNS, ip6 string) {
	t.Helper()
	host := func(args ...string) {
		t.Helper()
		if hostNS != "" {
			args = append([]string{"-n", hostNS}, args...)
		}
		Run(t, "ip", args...)
	}
	Run(t, "ip", "netns", "exec", w.NS, "sysctl", "-q", "-w", "net/ipv6/conf/eth0/accept_dad=0")
	setIPv6(t, w.NS, "eth0", true)
	setIPv6(t, hostNS, w.HostIface, true)
	host("link", "set", w.HostIface, "down")
	host("link", "set", w.HostIface, "address", HostVethMAC)
	host("link", "set", w.HostIface, "up")
	Run(t, "ip", "-n", w.NS, "-6", "addr", "add", ip6+"/128", "dev", "eth0", "nodad")
	Run(t, "ip", "-n", w.NS, "-6", "route", "add", "default", "via", GatewayV6, "dev", "eth0")
}

// setIPv6 turns IPv6 on or off on iface in namespace ns ("" for the
// current one). On a node without IPv6 there is nothing to turn off.
func setIPv6(t testing.TB, ns, iface string, on bool) {
	t.Helper()
	if _, err := os.Stat("/proc/sys/net/ipv6"); os.IsNotExist(err) && !on {
		return
	}
	v := "1"
	if on {
		v = "0"
	}
	args := []string{"sysctl", "-q", "-w", "net/ipv6/conf/" + iface + "/disable_ipv6=" + v}
	if ns != "" {
		args = append([]string{"netns", "exec", ns}, args...)
		Run(t, "ip", args...)
		return
	}
	Run(t, args[0], args[1:]...)
}
