package e2e

import (
	"net"
	"strconv"
	"testing"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// svcIP6 is the IPv6 cluster IP of TestServicesIPv6.
const svcIP6 = "fd00:96::10"

// TestServicesIPv6 is TestServices over IPv6: an IPv6 cluster IP over two
// IPv6 backends of dual-stack workloads spreads connections over both,
// follows a backend's removal, is policed on the translated path, and
// lets a workload reach itself (hairpin).
func TestServicesIPv6(t *testing.T) {
	testutil.RequirePrivileged(t)
	d := StartDaemon(t)
	client, b1, b2 := NewDualStackWorkload(t, 41), NewDualStackWorkload(t, 42), NewDualStackWorkload(t, 43)
	for _, w := range []*Workload{client, b1, b2} {
		testutil.ServeName(t, w.NS, svcBackendPort, w.Pod)
	}
	v6 := func(ws ...*Workload) []*Workload {
		out := make([]*Workload, len(ws))
		for i, w := range ws {
			out[i] = w.InFamily(true)
		}
		return out
	}
	snapshot := []*felix.ToDataplane{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Endpoint(client, []string{profAllowAll}),
		Endpoint(b1, []string{profAllowAll}),
		Endpoint(b2, []string{profAllowAll}),
		ServiceMsg("web6", svcIP6, "TCP:80", "UDP:53"),
		BackendsMsg("web6", backendsOf(v6(b1, b2)...)...),
	}
	c := d.Connect(t, snapshot)
	c.WaitInSync(t)
	c.WaitStatus(t, "up", client.ID(), b1.ID(), b2.ID())
	tcpAddr := net.JoinHostPort(svcIP6, strconv.Itoa(svcTCPPort))
	udpAddr := net.JoinHostPort(svcIP6, strconv.Itoa(svcUDPPort))

	t.Run("tcp-spreads-over-backends", func(t *testing.T) {
		eventuallyAnswers(t, client, "tcp6", tcpAddr, b1.Pod)
		seen := map[string]int{}
		for i := range 100 {
			name, err := testutil.AskName(client.NS, "tcp6", tcpAddr)
			if err != nil {
				t.Fatalf("connection %d to the service: %v", i, err)
			}
			seen[name]++
		}
		if seen[b1.Pod] == 0 || seen[b2.Pod] == 0 || len(seen) != 2 {
			t.Fatalf("100 connections reached %v, want both %s and %s", seen, b1.Pod, b2.Pod)
		}
	})

	t.Run("udp", func(t *testing.T) {
		for i := range 20 {
			name, err := testutil.AskName(client.NS, "udp6", udpAddr)
			if err != nil || (name != b1.Pod && name != b2.Pod) {
				t.Fatalf("datagram %d to the service: %q %v", i, name, err)
			}
		}
	})

	t.Run("backend-removed", func(t *testing.T) {
		c.Send(t, BackendsMsg("web6", backendsOf(v6(b1)...)...))
		testutil.WaitFor(t, svcTimeout, "every new connection reaches "+b1.Pod, func() bool {
			for range 20 {
				if name, err := testutil.AskName(client.NS, "tcp6", tcpAddr); err != nil || name != b1.Pod {
					return false
				}
			}
			return true
		})
	})

	// Policy sees the backend: a client egress rule on the backend port
	// blocks the service; UDP, which it does not match, still passes.
	t.Run("client-egress-policy-blocks-service", func(t *testing.T) {
		deny := Policy("default", "deny-backend-port6", nil, Rules(Deny(Proto("tcp"), DstPorts(Port(svcBackendPort))), Allow()))
		c.Send(t, deny, Endpoint(client, []string{profAllowAll}, Tier("default", "", nil, []string{"deny-backend-port6"})))
		eventuallyBlocked(t, client, "tcp6", tcpAddr)
		if name, err := testutil.AskName(client.NS, "udp6", udpAddr); err != nil || name != b1.Pod {
			t.Fatalf("udp to the service under a tcp-only deny: %q %v", name, err)
		}
		c.Send(t, Endpoint(client, []string{profAllowAll}), PolicyRemove(PolicyID("deny-backend-port6")))
		eventuallyAnswers(t, client, "tcp6", tcpAddr, b1.Pod)
	})

	t.Run("hairpin", func(t *testing.T) {
		c.Send(t, BackendsMsg("web6", backendsOf(v6(client)...)...))
		eventuallyAnswers(t, client, "tcp6", tcpAddr, client.Pod)
	})
}
