package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// Ports served by the server workload B.
const (
	tcpPort      = 8080 // the "named" HTTP port
	tcpOther     = 8081
	tcpRangePort = 9090 // inside 9000-9100
	udpPort      = 7007
)

// Profiles every matrix scenario may reference.
const (
	profAllowAll   = "allow-all"
	profDenyAll    = "deny-all"    // no rules: whatever reaches it is dropped
	profEgressOnly = "egress-only" // outbound allowed, inbound dropped
)

// env is one daemon and its workloads, shared by the cases of one matrix
// run: A and C are clients, B serves TCP and UDP. Every case applies a full
// desired state, so a failed case does not poison the next.
type env struct {
	d        *Daemon
	c        *Controller
	a, b, cl *Workload
	legacy   bool
	stack    bool // --workload-redirect=false
	hostSide bool // --workload-redirect-peer=false
	last     Scenario
}

// TestPacketMatrix runs the whole matrix once per attach path.
func TestPacketMatrix(t *testing.T) {
	testutil.RequirePrivileged(t)
	modes := []struct {
		name   string
		legacy bool
		stack  bool
		args   []string
		wire   string
	}{
		{"tcx", false, false, []string{"--attach-mode=tcx"}, WireCurrent},
		// Every redirected packet through the destination's host side.
		{"legacy-tc", true, false, []string{"--attach-mode=tc", "--workload-redirect-peer=false"}, WireCurrent},
		// The controller speaks Felix v3.28-v3.31's encoding.
		{"tcx-felix-v3.31-wire", false, false, []string{"--attach-mode=tcx"}, WireLegacy},
		// Packets between the workloads routed by the host, as without dpd.
		{"tc-via-stack", true, true, []string{"--attach-mode=tc", "--workload-redirect=false"}, WireCurrent},
	}
	// Sequential on purpose: the runs use the same addresses and routes.
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { runMatrix(t, m.legacy, m.stack, m.args, m.wire) })
	}
}

func runMatrix(t *testing.T, legacy, stack bool, args []string, wire string) {
	testutil.RequirePrivileged(t)
	e := &env{legacy: legacy, stack: stack, hostSide: slices.Contains(args, "--workload-redirect-peer=false")}
	e.d = StartDaemon(t, args...)
	e.d.SetWire(wire)
	e.a, e.b, e.cl = NewWorkload(t, 1), NewWorkload(t, 2), NewWorkload(t, 3)
	e.b.Serve(t, []int{tcpPort, tcpOther, tcpRangePort}, []int{udpPort})

	// Snapshot, InSync, then every endpoint must come up before any probe.
	snap := e.base([]string{profAllowAll}, nil)
	msgs, err := snap.Messages(nil)
	if err != nil {
		t.Fatal(err)
	}
	e.c = e.d.Connect(t, msgs)
	e.last = snap
	e.c.WaitInSync(t)
	e.c.WaitStatus(t, "up", e.a.ID(), e.b.ID(), e.cl.ID())

	t.Run("attach-mode", e.attachMode)
	t.Run("inspect-attach-mode", e.inspectAttachMode)
	t.Run("workload-forwarding", e.workloadForwarding)
	for _, tc := range policyCases() {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
	}
	t.Run("conntrack-return", e.conntrackReturn)
	t.Run("unknown-interface-fails-closed", e.unknownInterface)
	t.Run("endpoint-removal", e.endpointRemoval)
	if wire == WireLegacy {
		// The run proves nothing unless dpd read the older encoding (the
		// policy cases send what differs: tiers, policy ids).
		log, err := os.ReadFile(e.d.LogPath)
		if err != nil || !strings.Contains(string(log), "controller speaks the Felix v3.28-v3.31 encoding") {
			t.Fatalf("dpd did not recognise the v3.28-v3.31 encoding (log read: %v)", err)
		}
	}
}

// base is the usual scenario: A and C allow everything, B gets bProfiles
// and bTiers, and extra adds the policies and IP sets they reference.
func (e *env) base(bProfiles []string, bTiers []*felix.TierInfo, extra ...*felix.ToDataplane) Scenario {
	s := Scenario{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Endpoint(e.a, []string{profAllowAll}),
		Endpoint(e.cl, []string{profAllowAll}),
		Endpoint(e.b, bProfiles, bTiers...),
	}
	for _, p := range bProfiles {
		switch p {
		case profDenyAll:
			s = append(s, Profile(profDenyAll, nil, nil))
		case profEgressOnly:
			s = append(s, Profile(profEgressOnly, nil, Rules(Allow())))
		}
	}
	return append(s, extra...)
}

// apply moves dpd to s and waits until it has been applied.
func (e *env) apply(t *testing.T, s Scenario) {
	t.Helper()
	msgs, err := s.Messages(e.last)
	if err != nil {
		t.Fatal(err)
	}
	e.c.Send(t, msgs...)
	e.last = s
	e.c.Barrier(t)
	// A policy dpd could not install shows as a status, not as packets.
	e.c.WaitStatus(t, "up", s.EndpointIDs()...)
}

// send sends raw messages (deltas) and waits until they have been applied.
func (e *env) send(t *testing.T, msgs ...*felix.ToDataplane) {
	t.Helper()
	e.c.Send(t, msgs...)
	e.c.Barrier(t)
}

// attachMode checks that the requested attach path is the one in use.
func (e *env) attachMode(t *testing.T) {
	a := Observe(e.d.PinDir, e.b)
	if len(a.Errs) > 0 {
		t.Errorf("cannot observe %s: %s", e.b.HostIface, a)
	}
	var kinds []string
	for _, p := range a.Progs {
		if !strings.HasPrefix(p.Name, "dpd_") {
			t.Errorf("unexpected program %q (%s) on %s", p.Name, p.Kind, e.b.HostIface)
		}
		kinds = append(kinds, p.Kind)
	}
	joined := strings.Join(kinds, ",")
	if e.legacy {
		if a.TCIngress == "" || a.TCEgress == "" {
			t.Errorf("--attach-mode=tc: want tc filters on both hooks of %s: %s", e.b.HostIface, a)
		}
		if strings.Contains(joined, "tcx") || len(a.LinkPins) != 0 {
			t.Errorf("--attach-mode=tc: found TCX attachments on %s: %s", e.b.HostIface, a)
		}
	} else {
		if !strings.Contains(joined, "tcx/ingress") || !strings.Contains(joined, "tcx/egress") {
			t.Errorf("want TCX programs on both hooks of %s: %s", e.b.HostIface, a)
		}
		if len(a.LinkPins) != 2 {
			t.Errorf("want 2 TCX link pins for %s under %s/links: %s", e.b.HostIface, e.d.PinDir, a)
		}
	}
	if !a.IfState {
		t.Errorf("no dpd_ifstate entry for %s (ifindex %d)", e.b.HostIface, e.b.Ifindex)
	}
	if a.Route == "" {
		t.Errorf("dpd added no route to %s", e.b.IP)
	}
	t.Logf("%s: %s", e.b.HostIface, a)
}

// inspectAttachMode checks that Inspect reports the attach path in use.
func (e *env) inspectAttachMode(t *testing.T) {
	eps, err := e.d.Endpoints(t)
	if err != nil {
		t.Fatalf("Inspect/ListEndpoints: %v", err)
	}
	want := map[bool]string{false: "tcx", true: "tc"}[e.legacy]
	for _, ep := range eps {
		if ep.GetInterface() != e.b.HostIface {
			continue
		}
		if ep.GetStatus() != "up" || ep.GetAttachMode() != want {
			t.Errorf("Inspect says %s is %q (reason %q) attached by %q; want up by %q",
				ep.GetInterface(), ep.GetStatus(), ep.GetReason(), ep.GetAttachMode(), want)
		}
		return
	}
	t.Errorf("Inspect/ListEndpoints does not list %s: %v", e.b.HostIface, eps)
}

// workloadForwarding: Inspect reports how packets between workloads
// travel, and they do: redirected, the host's prerouting and forward hooks
// never see A's pings to B or B's replies; via the stack they see each.
// Redirected into the destination's namespace, B's host side transmits
// only the flow's first request; kept on the host side, every one.
func (e *env) workloadForwarding(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := e.d.Client(t).Inspect().GetStatus(ctx, &dpdv1.GetStatusRequest{})
	if err != nil {
		t.Fatalf("Inspect/GetStatus: %v", err)
	}
	want := map[bool]string{false: "redirect", true: "stack"}[e.stack]
	if got := st.GetWorkloadForwarding(); got != want {
		t.Errorf("Inspect says workload forwarding %q, want %q", got, want)
	}
	peer := !e.stack && !e.hostSide
	if got := st.GetWorkloadRedirectPeer(); got != peer {
		t.Errorf("Inspect says redirect to the peer %v, want %v", got, peer)
	}
	e.apply(t, e.base([]string{profAllowAll}, nil))
	Expect(t, Allowed(Ping(e.a, e.b.IP)))
	hooks := testutil.HostHooks(t, fmt.Sprintf("dpde2e_fwd_%d", os.Getpid()), e.a.IP, e.b.IP)
	const n = 10
	tx := hostTxPackets(t, e.b.HostIface)
	if out, err := e.a.Exec("ping", "-n", "-c", fmt.Sprint(n), "-i", "0.01", "-W", "1", e.b.IP); err != nil {
		t.Fatalf("ping A->B: %v\n%s", err, out)
	}
	pre, fwd := hooks.Packets(t, "prerouted"), hooks.Packets(t, "forwarded")
	if e.stack && (pre < 2*n || fwd < 2*n) {
		t.Errorf("via the stack: the host's hooks saw prerouting %d, forward %d of %d pings and replies", pre, fwd, 2*n)
	}
	if !e.stack && (pre != 0 || fwd != 0) {
		t.Errorf("redirected: the host's hooks saw prerouting %d, forward %d packets between A and B, want none", pre, fwd)
	}
	// Slack of two for the neighbour traffic the host sends B itself.
	if tx := hostTxPackets(t, e.b.HostIface) - tx; peer && tx > 3 {
		t.Errorf("redirected to the peer: B's host side transmitted %d of %d pings, want the first only", tx, n)
	} else if !peer && tx < n {
		t.Errorf("B's host side transmitted %d of %d pings, want each", tx, n)
	}
}

// hostTxPackets is the transmit packet counter of the host's ifname.
func hostTxPackets(t *testing.T, ifname string) uint64 {
	t.Helper()
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		t.Fatalf("link %s: %v", ifname, err)
	}
	return l.Attrs().Statistics.TxPackets
}

// conntrackReturn: A may send anything but accept nothing; replies to A's
// own flows must still arrive through connection tracking.
func (e *env) conntrackReturn(t *testing.T) {
	s := Scenario{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Profile(profEgressOnly, nil, Rules(Allow())),
		Policy("t1", "t1.deny-in", Rules(Deny()), nil),
		Endpoint(e.a, []string{profEgressOnly}, Tier("t1", "", []string{"t1.deny-in"}, nil)),
		Endpoint(e.b, []string{profAllowAll}),
		Endpoint(e.cl, []string{profAllowAll}),
	}
	e.apply(t, s)
	Expect(t,
		Allowed(Ping(e.a, e.b.IP)),
		Allowed(TCP(e.a, e.b.IP, tcpPort)),
		Allowed(UDP(e.a, e.b.IP, udpPort)),
		Denied(Ping(e.b, e.a.IP)),
		Denied(Ping(e.cl, e.a.IP)),
	)
}
