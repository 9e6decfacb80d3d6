package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// TestObserveStagedPreview: with --staged-preview, a connection a staged
// policy would deny passes, and observe shows it allowed by what enforced
// it and "would deny" by the staged policy's rule; the namespace's labels
// filter it.
func TestObserveStagedPreview(t *testing.T) {
	testutil.RequirePrivileged(t)
	d := StartDaemon(t, "--staged-preview")
	a, b := NewWorkload(t, 1), NewWorkload(t, 2)
	b.Serve(t, []int{tcpPort}, nil)
	lockID := &felix.PolicyID{Name: "t1.lock", Kind: model.KindStagedGlobalNetworkPolicy}
	lock := &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
		Id: lockID, Policy: &felix.Policy{Tier: "t1", InboundRules: Rules(Deny(Proto("tcp"), DstPorts(Port(tcpPort))))},
	}}}
	snap := Scenario{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Endpoint(a, []string{profAllowAll}),
		Endpoint(b, []string{profAllowAll}, &felix.TierInfo{Name: "t1", IngressPolicies: []*felix.PolicyID{lockID}}),
		lock,
	}
	msgs, err := snap.Messages(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := d.Connect(t, msgs)
	c.WaitInSync(t)
	c.WaitStatus(t, "up", a.ID(), b.ID())
	// The workloads' namespace, with labels Observe can filter by.
	c.Send(t, &felix.ToDataplane{Payload: &felix.ToDataplane_NamespaceUpdate{NamespaceUpdate: &felix.NamespaceUpdate{
		Id: &felix.NamespaceID{Name: strings.Split(b.ID().GetWorkloadId(), "/")[0]}, Labels: map[string]string{"team": "web"}}}})

	Expect(t, Allowed(TCP(a, b.IP, tcpPort)))

	bID := fmt.Sprintf("k8s/%s/eth0", b.ID().GetWorkloadId())
	var f *dpdv1.Flow
	testutil.WaitFor(t, 10*time.Second, "the previewed connect in observe", func() bool {
		for _, g := range observed(t, d, "--endpoint", bID, "--staged-differs", "--port", fmt.Sprint(tcpPort)) {
			if g.GetDirection() == "ingress" && g.GetDestination().GetPort() == tcpPort {
				f = g
				return true
			}
		}
		return false
	})
	sr := f.GetStagedRule()
	if f.GetVerdict() != "allow" || f.GetDecidedBy() != "profile" || f.GetStagedVerdict() != "deny" ||
		f.GetStagedDecidedBy() != "policy" || sr.GetTier() != "t1" || !strings.HasSuffix(sr.GetPolicy(), "t1.lock") ||
		sr.GetIndex() != 0 || sr.GetAction() != "deny" {
		t.Fatalf("previewed flow: %v", f)
	}
	text := dpdctl(t, d, "observe", "--endpoint", bID, "--staged-differs", "--port", fmt.Sprint(tcpPort))
	if !strings.Contains(text, "ALLOWED") || !strings.Contains(text, "staged: would deny") || !strings.Contains(text, "t1.lock#0") {
		t.Errorf("dpdctl observe printed %q, want ALLOWED and staged: would deny … t1.lock#0", text)
	}
	t.Logf("%s", strings.TrimSpace(text))

	// The namespace's labels filter.
	testutil.WaitFor(t, 5*time.Second, "a flow with --label team=web", func() bool {
		return len(observed(t, d, "--label", "team=web", "--port", fmt.Sprint(tcpPort))) > 0
	})
	if fs := observed(t, d, "--label", "team=db"); len(fs) != 0 {
		t.Errorf("--label team=db: %d flows, want none", len(fs))
	}
}
