package linux

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

func newTestKernel(t *testing.T) *Kernel {
	t.Helper()
	testutil.RequirePrivileged(t)
	pin := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dpd-linux-test-%d", os.Getpid()))
	t.Cleanup(func() { _ = os.RemoveAll(pin) })
	k, err := New(Options{PinDir: pin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func allowAll() model.DirectionPolicy {
	return model.DirectionPolicy{Profiles: []model.PolicyRules{{Name: "allow", Kind: "profile", Rules: []model.Rule{{Action: model.ActionAllow}}}}}
}

func denyAll() model.DirectionPolicy {
	return model.DirectionPolicy{Profiles: []model.PolicyRules{{Name: "deny", Kind: "profile", Rules: []model.Rule{{Action: model.ActionDeny}}}}}
}

func endpointFor(w *testutil.Workload, n int, in, out model.DirectionPolicy) *model.Endpoint {
	return &model.Endpoint{
		ID:       model.WorkloadID{Orchestrator: "k8s", Workload: fmt.Sprintf("ns/pod%d", n), Endpoint: "eth0"},
		Iface:    w.HostIface,
		IPv4Nets: []netip.Prefix{netip.MustParsePrefix(w.IP + "/32")},
		Ingress:  in,
		Egress:   out,
	}
}

// allowedPair is two workloads on ipA and ipB, both applied with
// allow-all policies once the monitor sees their interfaces.
func allowedPair(t *testing.T, k *Kernel, ipA, ipB string) (a, b *testutil.Workload, epA, epB *model.Endpoint) {
	t.Helper()
	a, b = testutil.NewWorkload(t, "cali", ipA), testutil.NewWorkload(t, "cali", ipB)
	testutil.WaitFor(t, 5*time.Second, "monitor sees both interfaces", func() bool {
		_, okA := k.mon.Ifindex(a.HostIface)
		_, okB := k.mon.Ifindex(b.HostIface)
		return okA && okB
	})
	epA, epB = endpointFor(a, 1, allowAll(), allowAll()), endpointFor(b, 2, allowAll(), allowAll())
	for _, ep := range []*model.Endpoint{epA, epB} {
		if err := k.ApplyEndpoint(ep); err != nil {
			t.Fatalf("apply %s: %v", ep.Iface, err)
		}
	}
	return a, b, epA, epB
}

func pings(w *testutil.Workload, ip string) bool {
	_, err := w.Exec("ping", "-c1", "-W1", ip)
	return err == nil
}

// TestKernelEnforcesAndShares drives the composed kernel directly: policy is
// enforced on real packets, endpoints with equal policy share programs, a
// policy change swaps programs without detaching, and removal cleans up.
func TestKernelEnforcesAndShares(t *testing.T) {
	k := newTestKernel(t)
	a, b, _, _ := allowedPair(t, k, "10.66.0.1", "10.66.0.2")
	if n := k.ProgramCount(); n != 2 {
		t.Fatalf("two endpoints with equal policy loaded %d programs, want 2 (one per direction)", n)
	}
	testutil.WaitFor(t, 5*time.Second, "a pings b", func() bool { return pings(a, b.IP) })

	before, _ := k.Endpoint(b.HostIface)
	epB2 := endpointFor(b, 2, denyAll(), allowAll())
	if err := k.ApplyEndpoint(epB2); err != nil {
		t.Fatal(err)
	}
	after, _ := k.Endpoint(b.HostIface)
	if before.IngressProgram == after.IngressProgram || before.EgressProgram != after.EgressProgram {
		t.Fatalf("policy swap: ingress %s -> %s, egress %s -> %s", before.IngressProgram, after.IngressProgram, before.EgressProgram, after.EgressProgram)
	}
	if pings(a, b.IP) {
		t.Fatal("ping passed after b's ingress became deny")
	}
	if n := k.ProgramCount(); n != 3 {
		t.Fatalf("after the swap %d programs loaded, want 3", n)
	}

	if err := k.RemoveEndpoint(epB2); err != nil {
		t.Fatal(err)
	}
	if n := k.ProgramCount(); n != 2 {
		t.Fatalf("after removing b %d programs loaded, want 2", n)
	}
	out := testutil.Run(t, "ip", "route", "show", b.IP)
	if out != "" {
		t.Fatalf("route for removed endpoint left: %q", out)
	}
	// Removal never detaches: b's interface keeps dpd's entry programs
	// (and their link pins, which hold them) and drops everything.
	if d, ok := k.Endpoint(b.HostIface); !ok || d.Ready || d.IngressProgram != "" || d.EgressProgram != "" {
		t.Fatalf("removed endpoint's interface: %+v (tracked %v), want tracked, not ready, no policy", d, ok)
	}
	if ok, ready := ifState(t, k, ifindexOf(t, b.HostIface)); !ok || ready {
		t.Fatalf("removed endpoint's ifstate present %v ready %v, want present and not ready", ok, ready)
	}
	if n := entryProgs(t, ifindexOf(t, b.HostIface)); n != 2 {
		t.Fatalf("%d programs attached to the removed endpoint's interface, want dpd's 2 entry programs", n)
	}
	if _, err := os.Stat(filepath.Join(k.opts.PinDir, "links", b.HostIface+"_ingress")); err != nil {
		t.Fatalf("link pin of the removed endpoint's interface: %v", err)
	}
	if pings(a, b.IP) {
		t.Fatal("a pings b after b's endpoint was removed: its interface must drop")
	}
}
