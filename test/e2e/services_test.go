package e2e

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// The service under test: cluster IP svcIP, TCP port 80 and UDP port 53,
// both served by the backends on port svcBackendPort.
const (
	svcIP          = "10.96.0.10"
	svcTCPPort     = 80
	svcUDPPort     = 53
	svcBackendPort = 8080
	svcTimeout     = 10 * time.Second
)

// ServiceMsg describes service ns/name with one cluster IP and ports given
// as "TCP:80", "UDP:53".
func ServiceMsg(name, clusterIP string, ports ...string) *felix.ToDataplane {
	u := &felix.ServiceUpdate{Namespace: "ns", Name: name, Type: "ClusterIP", ClusterIps: []string{clusterIP}}
	for _, p := range ports {
		proto, port, _ := net.SplitHostPort(p)
		n, _ := strconv.Atoi(port)
		u.Ports = append(u.Ports, &felix.ServicePort{Protocol: proto, Port: int32(n)})
	}
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ServiceUpdate{ServiceUpdate: u}}
}

// BackendsMsg replaces the backends of service ns/name (dpd's extension).
func BackendsMsg(name string, backends ...*felix.ServiceBackend) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ServiceBackendsUpdate{ServiceBackendsUpdate: &felix.ServiceBackendsUpdate{
		Namespace: "ns", Name: name, Backends: backends,
	}}}
}

// Backend is w serving proto on svcBackendPort, ready.
func Backend(w *Workload, proto string) *felix.ServiceBackend {
	return &felix.ServiceBackend{Ip: w.IP, Port: svcBackendPort, Protocol: proto, Ready: true}
}

// backendsOf lists TCP and UDP backends for each workload.
func backendsOf(ws ...*Workload) []*felix.ServiceBackend {
	var out []*felix.ServiceBackend
	for _, w := range ws {
		out = append(out, Backend(w, "TCP"), Backend(w, "UDP"))
	}
	return out
}

// eventuallyAnswers waits until a connection from src to addr is answered
// by want.
func eventuallyAnswers(t *testing.T, src *Workload, network, addr, want string) {
	t.Helper()
	svcEventually(t, fmt.Sprintf("%s %s -> %s answered by %s", network, src.Pod, addr, want), func() (bool, string) {
		got, err := testutil.AskName(src.NS, network, addr)
		if err != nil {
			return false, err.Error()
		}
		return got == want, "answered by " + got
	})
}

// eventuallyBlocked waits until connections from src to addr fail.
func eventuallyBlocked(t *testing.T, src *Workload, network, addr string) {
	t.Helper()
	svcEventually(t, fmt.Sprintf("%s %s -> %s blocked", network, src.Pod, addr), func() (bool, string) {
		got, err := testutil.AskName(src.NS, network, addr)
		return err != nil, "answered by " + got
	})
}

// svcEventually retries probe until it succeeds or svcTimeout passes; each
// probe blocks on real packets (up to a second), so the loop paces itself.
func svcEventually(t *testing.T, what string, probe func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(svcTimeout)
	for {
		ok, detail := probe()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last: %s)", svcTimeout, what, detail)
		}
	}
}

// TestServices drives a real dpd with a TCP+UDP service backed by two
// workloads and judges by connections: load balancing, backend removal,
// policy on the translated path, and a workload reaching itself.
func TestServices(t *testing.T) {
	testutil.RequirePrivileged(t)
	d := StartDaemon(t)
	client, b1, b2 := NewWorkload(t, 1), NewWorkload(t, 2), NewWorkload(t, 3)
	for _, w := range []*Workload{client, b1, b2} {
		testutil.ServeName(t, w.NS, svcBackendPort, w.Pod)
	}
	base := func() []*felix.ToDataplane {
		return []*felix.ToDataplane{
			Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
			Endpoint(client, []string{profAllowAll}),
			Endpoint(b1, []string{profAllowAll}),
			Endpoint(b2, []string{profAllowAll}),
		}
	}
	snapshot := append(base(),
		ServiceMsg("web", svcIP, "TCP:80", "UDP:53"),
		BackendsMsg("web", backendsOf(b1, b2)...))
	c := d.Connect(t, snapshot)
	c.WaitInSync(t)
	c.WaitStatus(t, "up", client.ID(), b1.ID(), b2.ID())
	tcpAddr := net.JoinHostPort(svcIP, strconv.Itoa(svcTCPPort))
	udpAddr := net.JoinHostPort(svcIP, strconv.Itoa(svcUDPPort))

	t.Run("tcp-spreads-over-backends", func(t *testing.T) {
		eventuallyAnswers(t, client, "tcp4", tcpAddr, b1.Pod)
		seen := map[string]int{}
		for i := range 200 {
			name, err := testutil.AskName(client.NS, "tcp4", tcpAddr)
			if err != nil {
				t.Fatalf("connection %d to the service: %v", i, err)
			}
			seen[name]++
		}
		t.Logf("200 connections: %v", seen)
		if seen[b1.Pod] == 0 || seen[b2.Pod] == 0 || len(seen) != 2 {
			t.Fatalf("200 connections reached %v, want both %s and %s", seen, b1.Pod, b2.Pod)
		}
	})

	t.Run("observe-shows-frontend-and-backend", func(t *testing.T) {
		backends := map[string]bool{b1.IP: true, b2.IP: true}
		testutil.WaitFor(t, svcTimeout, "a service flow in observe", func() bool {
			for _, f := range observed(t, d, "--endpoint", fmt.Sprintf("k8s/%s/eth0", client.ID().GetWorkloadId()), "--verdict", "allow") {
				if f.GetDirection() == "egress" && f.GetServiceIp() == svcIP && f.GetServicePort() == svcTCPPort &&
					backends[f.GetDestination().GetIp()] && f.GetDestination().GetPort() == svcBackendPort {
					return true
				}
			}
			return false
		})
	})

	t.Run("udp", func(t *testing.T) {
		seen := map[string]int{}
		for i := range 40 {
			name, err := testutil.AskName(client.NS, "udp4", udpAddr)
			if err != nil {
				t.Fatalf("datagram %d to the service: %v", i, err)
			}
			seen[name]++
		}
		if seen[b1.Pod]+seen[b2.Pod] != 40 {
			t.Fatalf("udp answers %v", seen)
		}
	})

	t.Run("backend-removed", func(t *testing.T) {
		c.Send(t, BackendsMsg("web", backendsOf(b1)...))
		testutil.WaitFor(t, svcTimeout, "every new connection reaches "+b1.Pod, func() bool {
			for range 20 {
				if name, err := testutil.AskName(client.NS, "tcp4", tcpAddr); err != nil || name != b1.Pod {
					return false
				}
			}
			return true
		})
		for i := range 100 {
			if name, err := testutil.AskName(client.NS, "tcp4", tcpAddr); err != nil || name != b1.Pod {
				t.Fatalf("connection %d after %s left: %q %v", i, b2.Pod, name, err)
			}
		}
	})

	// Policy sees the backend (Kubernetes semantics): a client egress rule
	// on the backend port, which the client never addressed, blocks the
	// service; UDP to the same service, which the rule does not match,
	// still passes.
	t.Run("client-egress-policy-blocks-service", func(t *testing.T) {
		deny := Policy("default", "deny-backend-port", nil, Rules(Deny(Proto("tcp"), DstPorts(Port(svcBackendPort))), Allow()))
		c.Send(t, deny, Endpoint(client, []string{profAllowAll}, Tier("default", "", nil, []string{"deny-backend-port"})))
		eventuallyBlocked(t, client, "tcp4", tcpAddr)
		if _, err := testutil.AskName(client.NS, "tcp4", net.JoinHostPort(b1.IP, strconv.Itoa(svcBackendPort))); err == nil {
			t.Fatal("direct connection to the backend passed the denying policy")
		}
		if name, err := testutil.AskName(client.NS, "udp4", udpAddr); err != nil || name != b1.Pod {
			t.Fatalf("udp to the service under a tcp-only deny: %q %v", name, err)
		}
		c.Send(t, Endpoint(client, []string{profAllowAll}), PolicyRemove(PolicyID("deny-backend-port")))
		eventuallyAnswers(t, client, "tcp4", tcpAddr, b1.Pod)
	})

	t.Run("backend-ingress-policy-blocks-service", func(t *testing.T) {
		deny := Policy("default", "deny-client", Rules(Deny(Proto("tcp"), SrcNet(client.IP+"/32")), Allow()), nil)
		c.Send(t, deny, Endpoint(b1, []string{profAllowAll}, Tier("default", "", []string{"deny-client"}, nil)))
		eventuallyBlocked(t, client, "tcp4", tcpAddr)
		c.Send(t, Endpoint(b1, []string{profAllowAll}), PolicyRemove(PolicyID("deny-client")))
		eventuallyAnswers(t, client, "tcp4", tcpAddr, b1.Pod)
	})

	// Hairpin: the client is the only backend and reaches itself.
	t.Run("hairpin", func(t *testing.T) {
		c.Send(t, BackendsMsg("web", backendsOf(client)...))
		eventuallyAnswers(t, client, "tcp4", tcpAddr, client.Pod)
		eventuallyAnswers(t, client, "udp4", udpAddr, client.Pod)
	})

	t.Run("service-removed", func(t *testing.T) {
		c.Send(t, &felix.ToDataplane{Payload: &felix.ToDataplane_ServiceRemove{ServiceRemove: &felix.ServiceRemove{Namespace: "ns", Name: "web"}}})
		eventuallyBlocked(t, client, "tcp4", tcpAddr)
	})
}
