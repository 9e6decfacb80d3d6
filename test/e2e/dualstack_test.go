package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// dualStackCases are the matrix cases that are the same in both families:
// they address workloads only through e.a/e.b/e.cl (and their IP), so a
// family view of the workloads runs them in IPv6. Cases with IPv4 literals
// (ICMP types, CIDRs, IP sets, named ports) have IPv6 forms of their own
// below or in the datapath's tests.
var dualStackCases = map[string]bool{
	"profile-allow": true, "no-policy-drops": true, "deny-before-allow": true,
	"pass-rule-falls-to-profile": true, "tier-default-pass": true,
	"staged-policy-never-enforced": true, "staged-only-tier-passes": true,
	"tier-default-deny": true, "dst-ports-and-ranges": true,
	"policy-update-changes-verdict": true,
}

// TestDualStackMatrix runs the family-independent packet matrix in IPv4
// and IPv6 against one dpd whose three workloads each have an IPv4 /32 and
// an IPv6 /128, wired like Calico's CNI plugin; then what is specific to
// two families: rules limited to one family never allow the other, CIDRs
// constrain the family, neighbour discovery works under a deny-all policy,
// conntrack replies in IPv6, and removal leaves no route of either family.
// Once per attach mode: `auto` picks either, by what the kernel charges.
func TestDualStackMatrix(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, mode := range []string{"tcx", "tc"} {
		t.Run(mode, func(t *testing.T) { dualStackMatrix(t, mode) })
	}
}

func dualStackMatrix(t *testing.T, mode string) {
	e := &env{}
	e.d = StartDaemon(t, "--attach-mode="+mode)
	a, b, cl := NewDualStackWorkload(t, 21), NewDualStackWorkload(t, 22), NewDualStackWorkload(t, 23)
	e.a, e.b, e.cl = a, b, cl
	b.Serve(t, []int{tcpPort, tcpOther, tcpRangePort}, []int{udpPort})

	snap := e.base([]string{profAllowAll}, nil)
	msgs, err := snap.Messages(nil)
	if err != nil {
		t.Fatal(err)
	}
	e.c = e.d.Connect(t, msgs)
	e.last = snap
	e.c.WaitInSync(t)
	e.c.WaitStatus(t, "up", a.ID(), b.ID(), cl.ID())
	// The pod's IPv6 block, as Felix sends it (outside the scenarios,
	// which never remove it).
	e.send(t, RouteMsg(&felix.RouteUpdate{Dst: WorkloadSubnet6 + "/120", Types: felix.RouteType_LOCAL_WORKLOAD,
		IpPoolType: felix.IPPoolType_NO_ENCAP, LocalWorkload: true}))

	t.Run("netlink", func(t *testing.T) { dualStackNetlink(t, b) })
	t.Run("inspect", func(t *testing.T) { dualStackInspect(t, e.d, b) })
	for _, fam := range []struct {
		name string
		v6   bool
	}{{"ipv4", false}, {"ipv6", true}} {
		t.Run(fam.name, func(t *testing.T) {
			e.a, e.b, e.cl = a.InFamily(fam.v6), b.InFamily(fam.v6), cl.InFamily(fam.v6)
			for _, tc := range policyCases() {
				if dualStackCases[tc.name] {
					t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
				}
			}
			t.Run("conntrack-return", e.conntrackReturn)
			if fam.v6 {
				for _, tc := range ipv6Cases() {
					t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
				}
			}
		})
	}
	e.a, e.b, e.cl = a, b, cl
	t.Run("ip-version", func(t *testing.T) { dualStackIPVersion(t, e, a, b, cl) })
	t.Run("neighbour-discovery-under-deny-all", func(t *testing.T) { dualStackND(t, e, a, b) })
	t.Run("ipv6-source-check", func(t *testing.T) { dualStackSourceCheck(t, e, a, b) })
	t.Run("endpoint-removal", func(t *testing.T) { dualStackRemoval(t, e, a, b, cl) })
}

// dualStackNetlink checks what dpd programmed for a dual-stack endpoint:
// a route of each family, the IPv6 sysctls and the gateway's link-local
// address on the host side.
func dualStackNetlink(t *testing.T, w *Workload) {
	for _, ip := range []string{w.IP4, w.IP6} {
		if r, err := RouteTo(ip); err != nil || !strings.Contains(r, "dev "+w.HostIface) || !strings.Contains(r, "proto 221") {
			t.Errorf("route to %s: %q %v", ip, r, err)
		}
	}
	for _, s := range []string{"forwarding", "proxy_ndp", "accept_ra", "disable_ipv6"} {
		want := map[string]string{"accept_ra": "0", "disable_ipv6": "0"}[s]
		if want == "" {
			want = "1"
		}
		out, err := tool("cat", "/proc/sys/net/ipv6/conf/"+w.HostIface+"/"+s)
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("net.ipv6.conf.%s.%s = %q (%v), want %s", w.HostIface, s, got, err, want)
		}
	}
	if out, err := tool("ip", "-6", "addr", "show", "dev", w.HostIface); err != nil || !strings.Contains(string(out), testutil.GatewayV6) {
		t.Errorf("%s lacks the gateway address %s: %s %v", w.HostIface, testutil.GatewayV6, out, err)
	}
	if out, err := tool("ip", "-6", "neigh", "show", w.IP6, "dev", w.HostIface); err != nil || !strings.Contains(string(out), "PERMANENT") {
		t.Errorf("no permanent IPv6 neighbour for %s on %s: %s %v", w.IP6, w.HostIface, out, err)
	}
}

// dualStackInspect: Inspect lists the endpoint's IPv6 net and the IPv6
// route.
func dualStackInspect(t *testing.T, d *Daemon, w *Workload) {
	eps, err := d.Endpoints(t)
	if err != nil {
		t.Fatalf("Inspect/ListEndpoints: %v", err)
	}
	found := false
	for _, ep := range eps {
		if ep.GetInterface() == w.HostIface {
			found = true
			if got := strings.Join(ep.GetIpv6Nets(), ","); got != w.IP6+"/128" {
				t.Errorf("Inspect says %s has IPv6 nets %q, want %s/128", w.HostIface, got, w.IP6)
			}
			if got := strings.Join(ep.GetIpv4Nets(), ","); got != w.IP4+"/32" {
				t.Errorf("Inspect says %s has IPv4 nets %q, want %s/32", w.HostIface, got, w.IP4)
			}
		}
	}
	if !found {
		t.Errorf("Inspect/ListEndpoints does not list %s", w.HostIface)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := d.Client(t).Inspect().ListRoutes(ctx, &dpdv1.ListRoutesRequest{})
	if err != nil {
		t.Fatalf("Inspect/ListRoutes: %v", err)
	}
	for _, r := range resp.GetRoutes() {
		if r.GetDst() == WorkloadSubnet6+"/120" {
			return
		}
	}
	t.Errorf("Inspect/ListRoutes lacks %s/120: %v", WorkloadSubnet6, resp.GetRoutes())
}

// dualStackIPVersion: a rule limited to one family, or whose CIDR is of
// one family, allows only that family.
func dualStackIPVersion(t *testing.T, e *env, a, b, cl *Workload) {
	a4, b4, a6, b6 := a.InFamily(false), b.InFamily(false), a.InFamily(true), b.InFamily(true)
	e.apply(t, e.onB("", profDenyAll, inB("v4-only", Allow(IPv4Only()))))
	Expect(t,
		Allowed(Ping(a4, b4.IP)), Allowed(TCP(a4, b4.IP, tcpPort)),
		Denied(Ping(a6, b6.IP)), Denied(TCP(a6, b6.IP, tcpPort)),
	)
	e.apply(t, e.onB("", profDenyAll, inB("v6-only", Allow(IPv6Only()))))
	Expect(t,
		Allowed(Ping(a6, b6.IP)), Allowed(TCP(a6, b6.IP, tcpPort)), Allowed(UDP(a6, b6.IP, udpPort)),
		Denied(Ping(a4, b4.IP)), Denied(TCP(a4, b4.IP, tcpPort)),
	)
	// No ip_version: the source CIDR alone limits the rule to its family.
	e.apply(t, e.onB("", profDenyAll, inB("from-a-v6", Allow(Proto("tcp"), SrcNet(hostNet(a.IP6))))))
	Expect(t, Allowed(TCP(a6, b6.IP, tcpPort)), Denied(TCP(a4, b4.IP, tcpPort)))
	e.apply(t, e.onB("", profDenyAll, inB("from-a-v4", Allow(Proto("tcp"), SrcNet(hostNet(a.IP4))))))
	Expect(t, Allowed(TCP(a4, b4.IP, tcpPort)), Denied(TCP(a6, b6.IP, tcpPort)))
	// A negated CIDR of one family never matches the other family either.
	e.apply(t, e.onB("", profDenyAll, inB("not-from-cl-v4", Allow(Proto("tcp"), NotSrcNet(hostNet(cl.IP4))))))
	Expect(t, Allowed(TCP(a4, b4.IP, tcpPort)), Denied(TCP(cl.InFamily(false), b4.IP, tcpPort)))
}

// dualStackND: B denies everything both ways, yet resolves its IPv6
// gateway (neighbour solicitation out, advertisement back), as Calico
// allows neighbour discovery under any policy. IPv4 ARP is not policed
// either; the IPv6 echo itself stays denied.
func dualStackND(t *testing.T, e *env, a, b *Workload) {
	e.apply(t, e.base([]string{profDenyAll}, nil))
	b6, a6 := b.InFamily(true), a.InFamily(true)
	Expect(t, Denied(Ping(b6, a6.IP)))
	testutil.WaitFor(t, VerdictTimeout*2, "B resolves its IPv6 gateway under deny-all", func() bool {
		_, _ = b.Exec("ip", "-6", "neigh", "flush", "dev", "eth0")
		_, _ = b.Exec("ping", "-n", "-c1", "-W1", a6.IP) // denied, but solicits the gateway first
		out, _ := b.Exec("ip", "-6", "neigh", "show", testutil.GatewayV6, "dev", "eth0")
		return strings.Contains(out, "lladdr "+testutil.HostVethMAC) && !strings.Contains(out, "FAILED")
	})
}

// dualStackSourceCheck: a workload sending from an IPv6 address the node
// does not route to it is dropped by the IPv6 source check (the ip6
// dpd-rpf table, IPv6's rp_filter), even towards an endpoint that allows
// everything; from its own address it passes.
func dualStackSourceCheck(t *testing.T, e *env, a, b *Workload) {
	e.apply(t, e.base([]string{profAllowAll}, nil))
	spoofed := WorkloadSubnet6 + "99"
	testutil.Run(t, "ip", "-n", a.NS, "-6", "addr", "add", spoofed+"/128", "dev", "eth0", "nodad")
	t.Cleanup(func() { _, _ = tool("ip", "-n", a.NS, "-6", "addr", "del", spoofed+"/128", "dev", "eth0") })
	drops := func() int {
		out, err := tool("nft", "list", "table", "ip6", "dpd-rpf")
		if err != nil {
			t.Fatalf("dpd wrote no ip6 dpd-rpf table: %v %s", err, out)
		}
		n := 0
		for _, f := range strings.Split(string(out), "counter packets ")[1:] {
			var p int
			if _, err := fmt.Sscan(f, &p); err == nil {
				n += p
			}
		}
		return n
	}
	Expect(t, Allowed(Ping(a.InFamily(true), b.IP6)))
	before := drops()
	spoof := Probe{Name: "ping from " + spoofed, Run: func() (bool, string) {
		out, err := a.Exec("ping", "-n", "-c1", "-W1", "-I", spoofed, b.IP6)
		return err == nil, lastLine(out)
	}}
	Expect(t, Denied(spoof))
	if after := drops(); after <= before {
		t.Errorf("the source check dropped nothing (%d -> %d): the spoofed packets died elsewhere", before, after)
	}
}

// dualStackRemoval removes C's endpoint: both of its routes go, and its
// interface drops both families.
func dualStackRemoval(t *testing.T, e *env, a, b, cl *Workload) {
	e.apply(t, e.base([]string{profAllowAll}, nil))
	Expect(t, Allowed(Ping(cl.InFamily(true), a.IP6)), Allowed(Ping(cl.InFamily(false), a.IP4)))
	e.apply(t, Scenario{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Endpoint(a, []string{profAllowAll}),
		Endpoint(b, []string{profAllowAll}),
	})
	e.c.WaitRemoved(t, cl.ID())
	testutil.WaitFor(t, cleanupTimeout, "the removed endpoint's routes gone", func() bool {
		r4, err4 := RouteTo(cl.IP4)
		r6, err6 := RouteTo(cl.IP6)
		return err4 == nil && err6 == nil && r4 == "" && r6 == ""
	})
	if out, err := tool("ip", "-6", "neigh", "show", cl.IP6, "dev", cl.HostIface); err != nil || strings.Contains(string(out), "PERMANENT") {
		t.Errorf("permanent IPv6 neighbour of the removed endpoint left: %s %v", out, err)
	}
	Expect(t,
		Denied(Ping(cl.InFamily(true), a.IP6)), Denied(Ping(cl.InFamily(false), a.IP4)),
		Allowed(Ping(a.InFamily(true), b.IP6)), Allowed(TCP(a.InFamily(true), b.IP6, tcpPort)),
	)
}
