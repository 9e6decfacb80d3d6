package linux

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestStagedPreviewKernel: a ping into an endpoint whose ingress preview
// denies passes, and its event says the staged policy would have denied
// it, naming the rule; removing the preview removes the label.
func TestStagedPreviewKernel(t *testing.T) {
	k := openKernelWith(t, Options{PinDir: newPinDir(t), Flows: FlowOptions{StagedPreview: true}})
	watch(t, k)
	a, b := newWorkload(t, "10.77.9.21"), newWorkload(t, "10.77.9.22")
	testutil.WaitFor(t, 5*time.Second, "both interfaces seen", func() bool {
		_, okA := k.mon.Ifindex(a.HostIface)
		_, okB := k.mon.Ifindex(b.HostIface)
		return okA && okB
	})
	lock := model.DirectionPolicy{Tiers: []model.Tier{{Name: "t1", DefaultAction: model.ActionDeny, Policies: []model.PolicyRules{
		{Name: "t1/StagedNetworkPolicy:ns/lock", Kind: "policy", Rules: []model.Rule{{Action: model.ActionDeny}}}}}},
		Profiles: allowAll().Profiles}
	lock = lock.WithDigest()
	epB := allowAllEndpoint(b, 2)
	epB.PreviewIngress = &lock
	for _, ep := range []*model.Endpoint{allowAllEndpoint(a, 1), epB} {
		if err := applyKnown(t, k, ep); err != nil {
			t.Fatalf("apply %s: %v", ep.Iface, err)
		}
	}
	next := pingEvents(t, k, b.HostIface)
	if !pingsQuick(a, b.IP) {
		t.Fatal("ping into b failed: the staged deny was enforced")
	}
	ev := next("preview")
	if !ev.Allowed || ev.Rule.Policy != "allow" || !ev.Staged || ev.StagedAllowed || !ev.StagedRuleFound ||
		ev.StagedRule.Policy != "t1/StagedNetworkPolicy:ns/lock" || ev.StagedRule.Index != 0 {
		t.Fatalf("event %+v: want allowed by profile allow, staged deny by t1/StagedNetworkPolicy:ns/lock#0", ev)
	}

	// Without the preview, a new flow (a later ping's ICMP id) has none.
	if err := applyKnown(t, k, allowAllEndpoint(b, 2)); err != nil {
		t.Fatal(err)
	}
	if k.preview.program(b.HostIface, model.Ingress) != nil {
		t.Fatal("preview program kept after the endpoint lost its preview")
	}
	if !pingsQuick(a, b.IP) {
		t.Fatal("ping into b failed")
	}
	if ev := next("no preview"); ev.Staged {
		t.Fatalf("event %+v still previewed", ev)
	}
}

// pingEvents follows k's flow events; the function it returns waits for
// the next new-flow ICMP event at iface's ingress.
func pingEvents(t *testing.T, k *Kernel, iface string) func(what string) model.FlowEvent {
	t.Helper()
	_, sub := k.ObserveFlows(time.Time{}, 0, true, 100)
	t.Cleanup(sub.Close)
	return func(what string) model.FlowEvent {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case ev := <-sub.Events():
				if !ev.End && ev.Iface == iface && ev.Direction == model.Ingress && ev.Proto == 1 {
					return ev
				}
			case <-deadline:
				t.Fatalf("%s: no event of the ping at %s's ingress within 5s", what, iface)
			}
		}
	}
}

// stagedLock is a staged preview that denies everything in tier t1.
func stagedLock() *model.DirectionPolicy {
	lock := model.DirectionPolicy{Tiers: []model.Tier{{Name: "t1", DefaultAction: model.ActionDeny, Policies: []model.PolicyRules{
		{Name: "t1/StagedNetworkPolicy:ns/lock", Kind: "policy", Rules: []model.Rule{{Action: model.ActionDeny}}}}}},
		Profiles: allowAll().Profiles}
	lock = lock.WithDigest()
	return &lock
}

// TestStagedPreviewRestart: a dpd restarted on the same pins keeps
// previewing at once, before the controller is in sync: the first new
// flow after the restart already reports "would deny", and the first
// apply keeps the preview as it is (adopted: nothing loaded or written)
// and names its rule again. A dpd started without previews removes them.
func TestStagedPreviewRestart(t *testing.T) {
	pin := newPinDir(t)
	opts := Options{PinDir: pin, Flows: FlowOptions{StagedPreview: true}}
	k1 := openKernelWith(t, opts)
	a, b := newWorkload(t, "10.77.9.31"), newWorkload(t, "10.77.9.32")
	epA, epB := allowAllEndpoint(a, 1), allowAllEndpoint(b, 2)
	epB.PreviewIngress = stagedLock()
	mustApply(t, k1, epA, epB)
	next := pingEvents(t, k1, b.HostIface)
	if !pingsQuick(a, b.IP) {
		t.Fatal("ping into b failed: the staged deny was enforced")
	}
	if ev := next("before the restart"); !ev.Staged || ev.StagedAllowed || !ev.StagedRuleFound {
		t.Fatalf("event before the restart %+v: want staged deny with its rule", ev)
	}
	if err := k1.Close(); err != nil {
		t.Fatal(err)
	}

	k2 := openKernelWith(t, opts)
	if ops := k2.Ops(); ops.Writes() != 0 {
		t.Fatalf("starting on adopted pins wrote: %+v", ops)
	}
	next = pingEvents(t, k2, b.HostIface)
	if !pingsQuick(a, b.IP) {
		t.Fatal("ping into b failed after the restart")
	}
	if ev := next("after the restart, before any apply"); !ev.Allowed || !ev.Staged || ev.StagedAllowed {
		t.Fatalf("event after the restart %+v: want allowed, staged deny", ev)
	}
	before := k2.Ops()
	mustApply(t, k2, epA, epB)
	if ops := k2.Ops().Sub(before); ops.Writes() != 0 || ops.ProgramAdopts != 3 {
		t.Errorf("first apply after the restart: %+v; want no writes and 3 adoptions (allow in, allow out, b's preview)", ops)
	}
	if k2.preview.program(b.HostIface, model.Ingress) == nil {
		t.Fatal("b's preview not adopted by the apply")
	}
	if !pingsQuick(a, b.IP) {
		t.Fatal("ping into b failed")
	}
	if ev := next("after the first apply"); !ev.Staged || ev.StagedAllowed || !ev.StagedRuleFound ||
		ev.StagedRule.Policy != "t1/StagedNetworkPolicy:ns/lock" {
		t.Fatalf("event after the first apply %+v: want staged deny by t1/StagedNetworkPolicy:ns/lock", ev)
	}
	if err := k2.Close(); err != nil {
		t.Fatal(err)
	}

	k3 := openKernelWith(t, Options{PinDir: pin})
	if prev, err := k3.datapath().Previews(); err != nil || len(prev) != 0 {
		t.Errorf("previews left installed by a dpd without them: %v (%v)", prev, err)
	}
	if _, err := os.Stat(filepath.Join(pin, "previews")); !os.IsNotExist(err) {
		t.Errorf("pinned previews left by a dpd without them: %v", err)
	}
}

// TestStagedPreviewSplitSurvivesStop: a preview split into two chunks
// keeps working while no dpd runs: stopping leaves its continuation in
// dpd_chain under the head still installed in dpd_preview (without it,
// the preview's tail call would fail and drop the packet), and the next
// dpd adopts it.
func TestStagedPreviewSplitSurvivesStop(t *testing.T) {
	pin := newPinDir(t)
	opts := Options{PinDir: pin, Flows: FlowOptions{StagedPreview: true}}
	k1 := openKernelWith(t, opts)
	a, b := newWorkload(t, "10.77.9.41"), newWorkload(t, "10.77.9.42")
	epA, epB := allowAllEndpoint(a, 1), allowAllEndpoint(b, 2)
	big := bigPolicy()
	big.Profiles = allowAll().Profiles
	big = big.WithDigest()
	epB.PreviewIngress = &big
	mustApply(t, k1, epA, epB)
	prog, ok := k1.preview.program(b.HostIface, model.Ingress).(interface{ ChainIndices() []uint32 })
	if !ok || len(prog.ChainIndices()) == 0 {
		t.Fatal("the big preview should be split into two chunks")
	}
	if !pingsQuick(a, b.IP) {
		t.Fatal("ping into b failed with the split preview")
	}
	if err := k1.Close(); err != nil {
		t.Fatal(err)
	}
	// No dpd: a new flow runs the preview's both chunks.
	if !pingsQuick(a, b.IP) {
		t.Fatal("ping into b failed while no dpd runs: the preview's continuation is gone")
	}
	k2 := openKernelWith(t, opts)
	next := pingEvents(t, k2, b.HostIface)
	if !pingsQuick(a, b.IP) {
		t.Fatal("ping into b failed after the restart")
	}
	if ev := next("after the restart"); !ev.Staged || !ev.StagedAllowed {
		t.Fatalf("event %+v: want the big preview's staged allow", ev)
	}
	before := k2.Ops()
	mustApply(t, k2, epA, epB)
	if ops := k2.Ops().Sub(before); ops.ProgramLoads != 0 {
		t.Errorf("first apply after the restart loaded %d programs, want 0", ops.ProgramLoads)
	}
}
