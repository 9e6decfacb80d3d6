package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/dataplane/memkernel"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

const waitTimeout = 10 * time.Second

// harness runs an engine against a memkernel for one test.
type harness struct {
	t    testing.TB
	k    *memkernel.Kernel
	e    *Engine
	ctx  context.Context
	sess *collector
}

// collector reads one session's Out into a list.
type collector struct {
	Session
	mu     sync.Mutex
	msgs   []Status // guarded by mu
	closed bool     // guarded by mu
}

func fastOptions(k *memkernel.Kernel) Options {
	return Options{
		Kernel:         k,
		Log:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		ApplyInterval:  time.Microsecond,
		ApplyBurst:     1000,
		RetryMin:       5 * time.Millisecond,
		RetryMax:       40 * time.Millisecond,
		HeartbeatFirst: 10 * time.Second,
	}
}

func newHarness(t testing.TB, tweak ...func(*Options)) *harness {
	t.Helper()
	k := memkernel.New()
	opts := fastOptions(k)
	for _, f := range tweak {
		f(&opts)
	}
	e := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("Run did not return")
		}
	})
	h := &harness{t: t, k: k, e: e, ctx: ctx}
	testutil.WaitFor(t, waitTimeout, "engine watching links", func() bool { return k.Watchers() == 1 })
	return h
}

// newWrappedHarness is newHarness over its memory kernel wrapped by wrap
// (a kernel that records or holds some calls).
func newWrappedHarness[K Kernel](t testing.TB, wrap func(*memkernel.Kernel) K) (*harness, K) {
	t.Helper()
	var k K
	h := newHarness(t, func(o *Options) {
		k = wrap(o.Kernel.(*memkernel.Kernel))
		o.Kernel = k
	})
	return h, k
}

// session starts a new session and collects its output.
func (h *harness) session() *collector {
	c := &collector{Session: h.e.NewSession("test")}
	go func() {
		for m := range c.Out() {
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
	}()
	h.sess = c
	return c
}

// send translates and submits msgs on the current session, then flushes.
func (h *harness) send(msgs ...*felix.ToDataplane) {
	h.t.Helper()
	for _, m := range msgs {
		if err := h.sess.Submit(h.ctx, tr(h.t, m)); err != nil {
			h.t.Fatalf("submit: %v", err)
		}
	}
	h.flush()
}

// tr translates a Felix test message as the server does. The tests write
// Felix messages because that is what controllers send; one that does not
// translate is a bug in the test.
func tr(t testing.TB, m *felix.ToDataplane) model.Update {
	t.Helper()
	u, err := felixconv.Translate(m)
	if err != nil {
		t.Fatalf("test message invalid: %v", err)
	}
	return u
}

// submitFelix hands m to s as the server does: translated and submitted,
// or rejected with the translation's reason.
func submitFelix(ctx context.Context, s Session, m *felix.ToDataplane) error {
	u, err := felixconv.Translate(m)
	if err == nil {
		return s.Submit(ctx, u)
	}
	var fe *felixconv.Error
	if !errors.As(err, &fe) {
		return fmt.Errorf("translate returned %T: %w", err, err)
	}
	return s.Reject(ctx, fe.Rejection())
}

func (h *harness) flush() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, waitTimeout)
	defer cancel()
	if err := h.e.Flush(ctx); err != nil {
		h.t.Fatalf("flush: %v", err)
	}
	// Unread statuses coalesce, so tests that follow each status must let
	// the collector read what the engine queued before the next step.
	if c := h.sess; c != nil && !c.isClosed() {
		s := c.Session.(*session)
		testutil.WaitFor(h.t, waitTimeout, "collector read every status", func() bool {
			done, sent := s.drained()
			return s.isClosed() || (done && uint64(c.received()) == sent)
		})
	}
}

func (c *collector) received() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *collector) snapshot() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Status(nil), c.msgs...)
}

func (c *collector) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// waitFor waits until pred holds for the messages received so far.
func (c *collector) waitFor(t testing.TB, what string, pred func([]Status) bool) []Status {
	t.Helper()
	var got []Status
	testutil.WaitFor(t, waitTimeout, what, func() bool {
		got = c.snapshot()
		return pred(got)
	})
	return got
}

// statuses returns the workload statuses sent for endpoint wl, in order.
func statuses(msgs []Status, wl string) []string {
	var out []string
	for _, m := range msgs {
		if u, ok := m.(*WorkloadStatus); ok && u.ID.Workload == wl {
			out = append(out, u.Status)
		}
	}
	return out
}

func count(msgs []Status, pred func(Status) bool) int {
	n := 0
	for _, m := range msgs {
		if pred(m) {
			n++
		}
	}
	return n
}

func isInSync(m Status) bool    { _, ok := m.(*DataplaneInSync); return ok }
func isHeartbeat(m Status) bool { _, ok := m.(*Heartbeat); return ok }
func isHappy(m Status) bool     { _, ok := m.(*HappyReport); return ok }

// writes sums the kernel calls that change state (everything but Link).
func writes(calls map[string]int) int {
	n := 0
	for m, c := range calls {
		if m != memkernel.MethodLink {
			n += c
		}
	}
	return n
}

// endpointStatus reads the engine's published status of workload wl.
func (h *harness) endpointStatus(wl string) (string, string) {
	info, ok := h.e.Endpoint(wl)
	if !ok {
		return "", ""
	}
	return info.Status, info.Reason
}

func (h *harness) noViolations() {
	h.t.Helper()
	if v := h.k.Violations(); len(v) > 0 {
		h.t.Fatalf("dependency violations: %v", v)
	}
}

// --- message builders ---

// td wraps a Felix payload message in a ToDataplane.
func td(p proto.Message) *felix.ToDataplane { return testutil.ToDataplane(p) }

func inSync() *felix.ToDataplane { return td(&felix.InSync{}) }

func config(kv ...string) *felix.ToDataplane {
	c := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		c[kv[i]] = kv[i+1]
	}
	return td(&felix.ConfigUpdate{Config: c})
}

func ipset(id string, members ...string) *felix.ToDataplane {
	return td(&felix.IPSetUpdate{Id: id, Type: felix.IPSetUpdate_IP, Members: members})
}

func ipsetDelta(id string, added, removed []string) *felix.ToDataplane {
	return td(&felix.IPSetDeltaUpdate{Id: id, AddedMembers: added, RemovedMembers: removed})
}

func ipsetRemove(id string) *felix.ToDataplane { return td(&felix.IPSetRemove{Id: id}) }

// allowFrom is an allow rule matching sources in the given sets (none: any).
func allowFrom(sets ...string) *felix.Rule { return &felix.Rule{Action: "allow", SrcIpSetIds: sets} }

func denyPort(port int32) *felix.Rule {
	return &felix.Rule{Action: "deny", Protocol: &felix.Protocol{NumberOrName: &felix.Protocol_Name{Name: "tcp"}},
		DstPorts: []*felix.PortRange{{First: port, Last: port}}}
}

func policy(name string, in ...*felix.Rule) *felix.ToDataplane {
	return td(&felix.ActivePolicyUpdate{Id: &felix.PolicyID{Name: name},
		Policy: &felix.Policy{InboundRules: in, OutboundRules: []*felix.Rule{allowFrom()}}})
}

func policyRemove(name string) *felix.ToDataplane {
	return td(&felix.ActivePolicyRemove{Id: &felix.PolicyID{Name: name}})
}

func profile(name string, in ...*felix.Rule) *felix.ToDataplane {
	return td(&felix.ActiveProfileUpdate{Id: &felix.ProfileID{Name: name},
		Profile: &felix.Profile{InboundRules: in, OutboundRules: []*felix.Rule{allowFrom()}}})
}

func wepID(wl string) *felix.WorkloadEndpointID {
	return &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: wl, EndpointId: "eth0"}
}

// wep is workload wl on interface "cali"+wl using policies (ingress, tier
// "default") and profiles.
func wep(wl, ip string, policies []string, profiles ...string) *felix.ToDataplane {
	ep := &felix.WorkloadEndpoint{State: "active", Name: "cali" + wl, ProfileIds: profiles,
		Ipv4Nets: []string{ip + "/32"}}
	if len(policies) > 0 {
		ti := &felix.TierInfo{Name: "default"}
		for _, p := range policies {
			ti.IngressPolicies = append(ti.IngressPolicies, &felix.PolicyID{Name: p})
		}
		ep.Tiers = []*felix.TierInfo{ti}
	}
	return td(&felix.WorkloadEndpointUpdate{Id: wepID(wl), Endpoint: ep})
}

func wepRemove(wl string) *felix.ToDataplane {
	return td(&felix.WorkloadEndpointRemove{Id: wepID(wl)})
}

func route(dst string) *felix.ToDataplane {
	return td(&felix.RouteUpdate{Dst: dst, DstNodeName: "node2", DstNodeIp: "192.168.0.2",
		Types: felix.RouteType_REMOTE_WORKLOAD})
}

func routeRemove(dst string) *felix.ToDataplane { return td(&felix.RouteRemove{Dst: dst}) }

func service(ns, name, clusterIP string) *felix.ToDataplane {
	return td(&felix.ServiceUpdate{Namespace: ns, Name: name, Type: "ClusterIP", ClusterIps: []string{clusterIP},
		Ports: []*felix.ServicePort{{Protocol: "TCP", Port: 80}}})
}

func backends(ns, name string, ips ...string) *felix.ToDataplane {
	u := &felix.ServiceBackendsUpdate{Namespace: ns, Name: name}
	for _, ip := range ips {
		u.Backends = append(u.Backends, &felix.ServiceBackend{Ip: ip, Port: 8080, Protocol: "TCP", Ready: true})
	}
	return td(u)
}

func hostMeta(host, ip string) *felix.ToDataplane {
	return td(&felix.HostMetadataUpdate{Hostname: host, Ipv4Addr: ip})
}

func vtep(node, mac, ip, parent string) *felix.ToDataplane {
	return td(&felix.VXLANTunnelEndpointUpdate{Node: node, Mac: mac, Ipv4Addr: ip, ParentDeviceIp: parent})
}

// submitBadNets submits an update of endpoint name whose IPv4 nets do not
// parse, as a controller might, through s.
func (h *harness) submitBadNets(t *testing.T, s Session, name, addr string) {
	t.Helper()
	bad := wep(name, addr, nil, "p")
	bad.GetWorkloadEndpointUpdate().Endpoint.Ipv4Nets = []string{"not-a-net"}
	if _, err := felixconv.Translate(bad); err == nil {
		t.Fatal("bad message validated")
	}
	if err := submitFelix(h.ctx, s, bad); err != nil {
		t.Fatal(err)
	}
}
