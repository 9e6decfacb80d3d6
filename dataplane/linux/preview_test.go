package linux

import (
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
	_, sub := k.ObserveFlows(time.Time{}, 0, true, 100)
	defer sub.Close()
	next := func(what string) model.FlowEvent {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case ev := <-sub.Events():
				if !ev.End && ev.Iface == b.HostIface && ev.Direction == model.Ingress && ev.Proto == 1 {
					return ev
				}
			case <-deadline:
				t.Fatalf("%s: no event of the ping at b's ingress within 5s", what)
			}
		}
	}
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
