package e2e

import (
	"strconv"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
)

// fragMTU is the workloads' MTU in the fragment test: a fragDatagram-byte
// datagram leaves in three fragments, and its echo returns in three.
const (
	fragMTU      = 1400
	fragDatagram = 4000
)

// ipStats reads the IP counters of w's namespace, named as IPv4's
// (/proc/net/snmp "Ip:"; with v6, /proc/net/snmp6's "Ip6" counters under
// the same names: FragCreates, ReasmOKs, ReasmReqds, InReceives).
func ipStats(t *testing.T, w *Workload, v6 bool) map[string]int {
	t.Helper()
	file := "/proc/net/snmp"
	if v6 {
		file = "/proc/net/snmp6"
	}
	out, err := w.Exec("cat", file)
	if err != nil {
		t.Fatalf("read %s in %s: %v (%s)", file, w.NS, err, out)
	}
	stats := map[string]int{}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case v6 && len(f) == 2 && strings.HasPrefix(f[0], "Ip6"):
			stats[strings.TrimPrefix(f[0], "Ip6")], _ = strconv.Atoi(f[1])
		case !v6 && len(f) > 0 && f[0] == "Ip:":
			if names == nil {
				names = f[1:]
				continue
			}
			for i, v := range f[1:] {
				if i < len(names) {
					stats[names[i]], _ = strconv.Atoi(v)
				}
			}
		}
	}
	if len(stats) == 0 {
		t.Fatalf("no IP counters in %s's %s", w.NS, file)
	}
	return stats
}

// TestFragmentedUDP sends a datagram larger than the MTU through B's
// ingress port rule: allowed, every fragment passes both hooks on the way
// in and the echo's fragments pass on the way back; denied, not one
// fragment reaches B.
func TestFragmentedUDP(t *testing.T) {
	testutil.RequirePrivileged(t)
	fragmentedUDP(t, NewWorkload(t, 1), NewWorkload(t, 2), false)
}

// TestFragmentedUDPIPv6 is TestFragmentedUDP between dual-stack workloads
// over IPv6, whose fragments carry a fragment extension header.
func TestFragmentedUDPIPv6(t *testing.T) {
	testutil.RequirePrivileged(t)
	fragmentedUDP(t, NewDualStackWorkload(t, 34), NewDualStackWorkload(t, 35), true)
}

func fragmentedUDP(t *testing.T, a, b *Workload, v6 bool) {
	d := StartDaemon(t)
	for _, w := range []*Workload{a, b} {
		testutil.Run(t, "ip", "link", "set", w.HostIface, "mtu", strconv.Itoa(fragMTU))
		testutil.Run(t, "ip", "-n", w.NS, "link", "set", "eth0", "mtu", strconv.Itoa(fragMTU))
	}
	b.Serve(t, nil, []int{udpPort})

	scenario := func(port int32) Scenario {
		return Scenario{
			Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
			Policy("t1", "t1.udp-port", Rules(Allow(Proto("udp"), DstPorts(Port(port)))), nil),
			Endpoint(a, []string{profAllowAll}),
			Endpoint(b, []string{profAllowAll}, Tier("t1", "Deny", []string{"t1.udp-port"}, nil)),
		}
	}
	allowed := scenario(udpPort)
	msgs, err := allowed.Messages(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := d.Connect(t, msgs)
	c.WaitInSync(t)
	c.WaitStatus(t, "up", a.ID(), b.ID())
	src, dst := a, b
	if v6 {
		src, dst = a.InFamily(true), b.InFamily(true)
	}

	t.Run("allowed", func(t *testing.T) {
		aBefore, bBefore := ipStats(t, a, v6), ipStats(t, b, v6)
		Expect(t, Allowed(UDPSize(src, dst.IP, udpPort, fragDatagram)))
		aAfter, bAfter := ipStats(t, a, v6), ipStats(t, b, v6)
		// The exchange really fragmented both ways and reassembled whole.
		if aAfter["FragCreates"]-aBefore["FragCreates"] < 3 || bAfter["ReasmOKs"]-bBefore["ReasmOKs"] < 1 {
			t.Errorf("request not fragmented and reassembled: A FragCreates +%d, B ReasmOKs +%d",
				aAfter["FragCreates"]-aBefore["FragCreates"], bAfter["ReasmOKs"]-bBefore["ReasmOKs"])
		}
		if bAfter["FragCreates"]-bBefore["FragCreates"] < 3 || aAfter["ReasmOKs"]-aBefore["ReasmOKs"] < 1 {
			t.Errorf("echo not fragmented and reassembled: B FragCreates +%d, A ReasmOKs +%d",
				bAfter["FragCreates"]-bBefore["FragCreates"], aAfter["ReasmOKs"]-aBefore["ReasmOKs"])
		}
	})

	t.Run("denied", func(t *testing.T) {
		denied := scenario(udpPort + 1)
		msgs, err := denied.Messages(allowed)
		if err != nil {
			t.Fatal(err)
		}
		c.Send(t, msgs...)
		c.Barrier(t)
		c.WaitStatus(t, "up", a.ID(), b.ID())
		before := ipStats(t, b, v6)
		Expect(t, Denied(UDPSize(src, dst.IP, udpPort, fragDatagram)))
		after := ipStats(t, b, v6)
		// Not even a later fragment got through to sit in B's reassembly queue.
		if n := after["ReasmReqds"] - before["ReasmReqds"]; n != 0 {
			t.Errorf("%d fragments reached B through a denying policy", n)
		}
		// IPv6 neighbour discovery passes without policy and counts in
		// Ip6InReceives: only fragments tell there.
		if n := after["InReceives"] - before["InReceives"]; n != 0 && !v6 {
			t.Errorf("%d packets reached B through a denying policy", n)
		}
	})
}

// TestFragmentedUDPService sends datagrams larger than the MTU to a
// service: every fragment reaches the backend the first fragment was
// DNAT'd to, and the echo's fragments all come back from the frontend
// (the probe's connected socket accepts nothing else); then the same with
// the client as its own backend (hairpin).
func TestFragmentedUDPService(t *testing.T) {
	testutil.RequirePrivileged(t)
	d := StartDaemon(t)
	client, backend := NewWorkload(t, 1), NewWorkload(t, 2)
	for _, w := range []*Workload{client, backend} {
		testutil.Run(t, "ip", "link", "set", w.HostIface, "mtu", strconv.Itoa(fragMTU))
		testutil.Run(t, "ip", "-n", w.NS, "link", "set", "eth0", "mtu", strconv.Itoa(fragMTU))
		w.Serve(t, nil, []int{svcBackendPort})
	}
	snapshot := Scenario{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Endpoint(client, []string{profAllowAll}),
		Endpoint(backend, []string{profAllowAll}),
		ServiceMsg("big", svcIP, "UDP:53"),
		BackendsMsg("big", Backend(backend, "UDP")),
	}
	c := d.Connect(t, snapshot)
	c.WaitInSync(t)
	c.WaitStatus(t, "up", client.ID(), backend.ID())

	t.Run("to-backend", func(t *testing.T) {
		before := ipStats(t, backend, false)
		Expect(t, Allowed(UDPSize(client, svcIP, svcUDPPort, fragDatagram)))
		if n := ipStats(t, backend, false)["ReasmOKs"] - before["ReasmOKs"]; n < 1 {
			t.Errorf("the backend reassembled %d datagrams, want the request", n)
		}
	})
	t.Run("hairpin", func(t *testing.T) {
		c.Send(t, BackendsMsg("big", Backend(client, "UDP")))
		c.Barrier(t)
		Expect(t, Allowed(UDPSize(client, svcIP, svcUDPPort, fragDatagram)))
	})
}
