package server_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/proto/felixlegacy"
	"github.com/dpd-dev/dpd/server"
	"github.com/dpd-dev/dpd/server/servertest"
)

// legacyClient is a policy-sync client of Calico v3.28-v3.31 (Dikastes):
// it reads the older message set only.
type legacyClient struct {
	t  *testing.T
	cs grpc.ClientStream
}

func openLegacyClient(t *testing.T, sock string) *legacyClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs, err := conn.NewStream(ctx, &felix.PolicySync_ServiceDesc.Streams[0], felix.PolicySync_Sync_FullMethodName, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&felix.SyncRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	return &legacyClient{t: t, cs: cs}
}

// recvUntil reads older-form messages until stop says so.
func (c *legacyClient) recvUntil(stop func(*felixlegacy.ToDataplane) bool) []*felixlegacy.ToDataplane {
	c.t.Helper()
	var out []*felixlegacy.ToDataplane
	for {
		m := &felixlegacy.ToDataplane{}
		if err := c.cs.RecvMsg(m); err != nil {
			c.t.Fatalf("policy-sync stream: %v after %d messages", err, len(out))
		}
		out = append(out, m)
		if stop(m) {
			return out
		}
	}
}

// legacyTierWorkload is a v3.28-v3.31 WorkloadEndpointUpdate with one tier
// whose ingress policies are the given names (none: no tier).
func legacyTierWorkload(wl, iface, tier string, names ...string) []byte {
	ep := [][]byte{pstr(1, "active"), pstr(2, iface), pstr(5, "10.65.0.1/32")}
	if len(names) > 0 {
		ti := [][]byte{pstr(1, tier)}
		for _, n := range names {
			ti = append(ti, pstr(2, n))
		}
		ep = append(ep, psub(7, ti...))
	}
	return psub(11, psub(1, pstr(2, "k8s"), pstr(3, wl), pstr(4, "eth0")), psub(5, ep...))
}

// TestPolicySyncServesTheControllersGeneration: with a v3.28-v3.31 Felix
// as the controller, a workload's policy-sync client is served that
// generation's messages, which its Dikastes reads: policies named by tier
// and name, tier lists of names, and a removal naming the tier its update
// did (the older client keys policies by both).
func TestPolicySyncServesTheControllersGeneration(t *testing.T) {
	dir, err := os.MkdirTemp("", "dpdps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d := servertest.StartConfig(t, server.Config{PolicySyncDir: dir})
	env := &psEnv{d: d, dir: dir}
	r := openRawSync(t, d.Socket)
	go func() { _ = r.recvEnd() }() // statuses are not this test's business
	r.send(pcat(pvar(15, 1), legacyPolicy("sec", "sec.allow-web", "allow")))
	r.send(pcat(pvar(15, 2), legacyTierWorkload("demo/a", "cali-a", "sec", "sec.allow-web")))
	r.send(pcat(pvar(15, 3), psub(1))) // InSync
	c := openLegacyClient(t, env.addWorkload(t, "uid-a", "demo", "a"))
	got := c.recvUntil(func(m *felixlegacy.ToDataplane) bool { return m.GetWorkloadEndpointUpdate() != nil })
	i := slices.IndexFunc(got, func(m *felixlegacy.ToDataplane) bool { return m.GetActivePolicyUpdate() != nil })
	if i < 0 {
		t.Fatalf("no policy before the endpoint: %v", got)
	}
	if id := got[i].GetActivePolicyUpdate().GetId(); id.GetTier() != "sec" || id.GetName() != "sec.allow-web" {
		t.Fatalf("policy id %v, want tier sec, name sec.allow-web", id)
	}
	tiers := got[len(got)-1].GetWorkloadEndpointUpdate().GetEndpoint().GetTiers()
	if len(tiers) != 1 || tiers[0].GetName() != "sec" || !slices.Equal(tiers[0].GetIngressPolicies(), []string{"sec.allow-web"}) {
		t.Fatalf("endpoint tiers %v, want sec: [sec.allow-web]", tiers)
	}

	// Felix drops the policy from the endpoint, then removes it.
	r.send(pcat(pvar(15, 4), legacyTierWorkload("demo/a", "cali-a", "")))
	r.send(pcat(pvar(15, 5), psub(8, psub(1, pstr(1, "sec"), pstr(2, "sec.allow-web")))))
	got = c.recvUntil(func(m *felixlegacy.ToDataplane) bool { return m.GetActivePolicyRemove() != nil })
	if id := got[len(got)-1].GetActivePolicyRemove().GetId(); id.GetTier() != "sec" || id.GetName() != "sec.allow-web" {
		t.Fatalf("removal names %v, want tier sec, name sec.allow-web", id)
	}
}
