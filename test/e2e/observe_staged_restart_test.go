package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
)

// TestObserveStagedPreviewRestart: dpd with --staged-preview is killed
// and started again on the same pins. Before any controller connects, a
// new connection the staged policy would deny passes and observe already
// reports it "would deny" (the previews were adopted with the endpoints);
// the controller's snapshot then loads nothing.
func TestObserveStagedPreviewRestart(t *testing.T) {
	testutil.RequirePrivileged(t)
	pin := fmt.Sprintf("/sys/fs/bpf/dpd-e2e-prevrs-%d", os.Getpid())
	t.Cleanup(func() {
		if err := os.RemoveAll(pin); err != nil {
			t.Errorf("remove pin dir %s: %v", pin, err)
		}
	})
	dir := t.TempDir()
	start := func(n int) *Daemon {
		t.Helper()
		cfg := daemonConfig(t, pin)
		// A socket per start: the first controller's session, which
		// retries, must not reach the restarted dpd.
		cfg.Socket = filepath.Join(dir, fmt.Sprintf("dpd-%d.sock", n))
		cfg.LogPath = filepath.Join(dir, fmt.Sprintf("dpd-%d.log", n))
		cfg.Extra = []string{"--staged-preview"}
		return launchDaemon(t, cfg, false)
	}
	a, b := NewWorkload(t, 1), NewWorkload(t, 2)
	b.Serve(t, []int{tcpPort}, nil)
	lockID := &felix.PolicyID{Name: "t1.lock", Kind: model.KindStagedGlobalNetworkPolicy}
	snap := Scenario{
		Profile(profAllowAll, Rules(Allow()), Rules(Allow())),
		Endpoint(a, []string{profAllowAll}),
		Endpoint(b, []string{profAllowAll}, &felix.TierInfo{Name: "t1", IngressPolicies: []*felix.PolicyID{lockID}}),
		&felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
			Id: lockID, Policy: &felix.Policy{Tier: "t1", InboundRules: Rules(Deny(Proto("tcp"), DstPorts(Port(tcpPort))))},
		}}},
	}
	msgs, err := snap.Messages(nil)
	if err != nil {
		t.Fatal(err)
	}
	// previewed waits for a new connection into b that observe reports
	// allowed and "would deny" by the staged policy, after seq.
	previewed := func(d *Daemon, what string, after uint64) uint64 {
		t.Helper()
		Expect(t, Allowed(TCP(a, b.IP, tcpPort)))
		var f *dpdv1.Flow
		testutil.WaitFor(t, 10*time.Second, what+": the previewed connect in observe", func() bool {
			for _, g := range observed(t, d, "--staged-differs", "--port", fmt.Sprint(tcpPort)) {
				if g.GetSeq() > after && g.GetDirection() == "ingress" && g.GetDestination().GetIp() == b.IP {
					f = g
				}
			}
			return f != nil
		})
		if f.GetVerdict() != "allow" || f.GetStagedVerdict() != "deny" {
			t.Fatalf("%s: flow %v, want allowed and staged deny", what, f)
		}
		return f.GetSeq()
	}

	d1 := start(1)
	c := d1.Connect(t, msgs)
	c.WaitInSync(t)
	c.WaitStatus(t, "up", a.ID(), b.ID())
	previewed(d1, "before the restart", 0)
	d1.Kill(t)

	d2 := start(2)
	// No controller yet: the engine has applied nothing.
	previewed(d2, "after the restart, before the controller", 0)
	c2 := d2.Connect(t, msgs)
	c2.WaitInSync(t)
	c2.WaitStatus(t, "up", a.ID(), b.ID())
	testutil.WaitFor(t, 10*time.Second, "the first apply's report", func() bool {
		return strings.Contains(d2.Log(), `msg="first apply after InSync done"`)
	})
	n := &node{t: t}
	if f, ok := n.firstApply(d2); !ok || f["program_loads"] != "0" {
		t.Errorf("first apply after the restart: %v; want program_loads=0 (the preview adopted too)", f)
	}
}
