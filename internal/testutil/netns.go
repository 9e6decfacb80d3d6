package testutil

import (
	"fmt"
	"os/exec"
	"sync/atomic"
	"testing"
)

var nsSeq atomic.Uint32

// Workload is a network namespace wired like a CNI-created pod: a veth whose
// host side (HostIface, named with the interface prefix) stays in the root
// namespace, and whose workload side eth0 has IP/32 with a default route via
// 169.254.1.1, as Calico's CNI plugin does. It is IPv4-only until AddIPv6:
// neither end has IPv6, so neither sends the unsolicited IPv6 a new
// interface sends (MLD reports, router and neighbour solicitations), which
// the other end's policy would otherwise count.
type Workload struct {
	NS        string
	HostIface string
	IP        string
}

// NewWorkload creates the namespace and veth; t.Cleanup deletes both even on
// failure. prefix is the host-side interface prefix (e.g. "cali").
func NewWorkload(t testing.TB, prefix, ip string) *Workload {
	t.Helper()
	n := nsSeq.Add(1)
	w := &Workload{
		NS:        fmt.Sprintf("dpdt%d-%d", pidSuffix(), n),
		HostIface: fmt.Sprintf("%s%d%d", prefix, pidSuffix()%1000, n),
		IP:        ip,
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", w.HostIface).Run()
		_ = exec.Command("ip", "netns", "del", w.NS).Run()
	})
	Run(t, "ip", "netns", "add", w.NS)
	Run(t, "ip", "link", "add", w.HostIface, "type", "veth", "peer", "name", "eth0", "netns", w.NS)
	// Before either end is up: an interface sends its first MLD report as
	// it comes up.
	setIPv6(t, "", w.HostIface, false)
	setIPv6(t, w.NS, "eth0", false)
	Run(t, "ip", "-n", w.NS, "link", "set", "lo", "up")
	Run(t, "ip", "-n", w.NS, "addr", "add", ip+"/32", "dev", "eth0")
	Run(t, "ip", "-n", w.NS, "link", "set", "eth0", "up")
	Run(t, "ip", "-n", w.NS, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
	Run(t, "ip", "-n", w.NS, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	Run(t, "ip", "link", "set", w.HostIface, "up")
	return w
}

// Exec runs a command inside the workload's namespace and returns its
// combined output and error.
func (w *Workload) Exec(name string, args ...string) (string, error) {
	full := append([]string{"netns", "exec", w.NS, name}, args...)
	out, err := exec.Command("ip", full...).CombinedOutput()
	return string(out), err
}
