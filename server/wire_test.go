package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/server/servertest"
)

// rawSync opens Dataplane/Sync and sends hand-encoded bytes, as an older
// Felix-generation controller would.
type rawSync struct {
	t  *testing.T
	cs grpc.ClientStream
}

func openRawSync(t *testing.T, socket string) *rawSync {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := dial(t, socket)
	cs, err := c.Conn().NewStream(ctx, &dpdv1.Dataplane_ServiceDesc.Streams[0], "/dpd.v1.Dataplane/Sync")
	if err != nil {
		t.Fatal(err)
	}
	return &rawSync{t: t, cs: cs}
}

func (r *rawSync) send(b []byte) {
	r.t.Helper()
	m := &emptypb.Empty{}
	m.ProtoReflect().SetUnknown(b) // marshals as exactly these bytes
	if err := r.cs.SendMsg(m); err != nil {
		r.t.Fatalf("send: %v", err)
	}
}

// recvEnd reads statuses until the stream ends and returns how.
func (r *rawSync) recvEnd() error {
	for {
		if err := r.cs.RecvMsg(&emptypb.Empty{}); err != nil {
			return err
		}
	}
}

func pcat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func pstr(num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
}

func pvar(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func psub(num protowire.Number, fields ...[]byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), pcat(fields...))
}

// legacyWorkload is a v3.28-v3.31 WorkloadEndpointUpdate (11): TierInfo
// policies (7: 2) are v1 names.
func legacyWorkload(wl, iface, ip string, ingress ...string) []byte {
	tier := [][]byte{pstr(1, "default")}
	for _, p := range ingress {
		tier = append(tier, pstr(2, p))
	}
	return psub(11,
		psub(1, pstr(2, "k8s"), pstr(3, wl), pstr(4, "eth0")),
		psub(5, pstr(1, "active"), pstr(2, iface), pstr(5, ip), psub(7, tier...)))
}

// legacyPolicy is a v3.28-v3.31 ActivePolicyUpdate (7): PolicyID {tier 1,
// name 2}; Policy without tier; one inbound rule with the given action.
func legacyPolicy(tier, name, action string) []byte {
	return psub(7, psub(1, pstr(1, tier), pstr(2, name)), psub(2, psub(1, pstr(1, action)), psub(2, pstr(1, "allow"))))
}

// legacySnapshot is an endpoint and its policies encoded the v3.28-v3.31
// way, then InSync: an enforced policy and one staged the older way (a
// name prefix), both in the endpoint's tier.
func legacySnapshot() [][]byte {
	return [][]byte{
		pcat(pvar(15, 1), legacyPolicy("default", "default.allow-all", "allow")),
		pcat(pvar(15, 2), legacyPolicy("default", "staged:default.deny-all", "deny")),
		pcat(pvar(15, 3), legacyWorkload("demo/a", "cali-a", "10.65.0.1/32", "staged:default.deny-all", "default.allow-all")),
		pcat(pvar(15, 4), psub(1)), // InSync
	}
}

// waitLegacyApplied waits until legacySnapshot's endpoint is applied with
// the enforced policy alone, and returns its id.
func waitLegacyApplied(t *testing.T, d *servertest.Daemon) model.WorkloadID {
	t.Helper()
	id := model.WorkloadID{Orchestrator: "k8s", Workload: "demo/a", Endpoint: "eth0"}
	testutil.WaitFor(t, 10*time.Second, "the older-encoded endpoint applied with its enforced policy", func() bool {
		ep, ok := d.Kernel.Endpoint(id)
		return ok && len(ep.Ingress.Tiers) == 1 && len(ep.Ingress.Tiers[0].Policies) == 1 &&
			strings.Contains(ep.Ingress.Tiers[0].Policies[0].Name, "default.allow-all")
	})
	return id
}

// TestSyncLegacyGeneration: a controller speaking the v3.28-v3.31
// encoding over gRPC gets its policy enforced; an undecodable update of
// an endpoint puts that endpoint in error and fails it closed; an
// undecodable message that names nothing ends the stream with
// InvalidArgument, logged and counted.
func TestSyncLegacyGeneration(t *testing.T) {
	d := servertest.Start(t, "")
	r := openRawSync(t, d.Socket)
	for _, m := range legacySnapshot() {
		r.send(m)
	}
	id := waitLegacyApplied(t, d)
	if n := d.MetricWhere(t, "dpd_felix_wire_messages_total", map[string]string{"transport": "grpc", "generation": "legacy"}); n != 3 {
		t.Fatalf("legacy messages counted: %v, want 3", n)
	}
	pols, err := dial(t, d.Socket).Inspect().ListPolicies(context.Background(), &dpdv1.ListPoliciesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	staged := map[string]bool{}
	for _, p := range pols.GetPolicies() {
		staged[p.GetName()] = p.GetStaged()
	}
	if !staged["StagedGlobalNetworkPolicy:default.deny-all"] || staged["GlobalNetworkPolicy:default.allow-all"] || len(staged) != 2 {
		t.Fatalf("Inspect policies (name: staged) %v", staged)
	}

	// The id reads, the tier does not: the endpoint fails closed.
	r.send(pcat(pvar(15, 5), psub(11, psub(1, pstr(2, "k8s"), pstr(3, "demo/a"), pstr(4, "eth0")),
		psub(5, pstr(2, "cali-a"), psub(7, []byte{0x12, 0x7f})))))
	testutil.WaitFor(t, 10*time.Second, "the endpoint in error, dropping everything", func() bool {
		ep, ok := d.Kernel.Endpoint(id)
		return ok && len(ep.Ingress.Tiers)+len(ep.Ingress.Profiles)+len(ep.Egress.Tiers)+len(ep.Egress.Profiles) == 0
	})

	// Nothing names what this one concerns: the stream ends.
	r.send([]byte{0x7a, 0x05, 0x01})
	err = r.recvEnd()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "undecodable") {
		t.Fatalf("stream ended with %v, want InvalidArgument naming the undecodable message", err)
	}
	if n := d.MetricWhere(t, "dpd_felix_decode_errors_total", map[string]string{"transport": "grpc", "outcome": "resync"}); n != 1 {
		t.Fatalf("resync decode errors: %v, want 1", n)
	}
	if n := d.MetricWhere(t, "dpd_felix_decode_errors_total", map[string]string{"transport": "grpc", "outcome": "endpoint"}); n != 1 {
		t.Fatalf("endpoint decode errors: %v, want 1", n)
	}
}

// Messages with payloads unknown to this build are ignored, and unknown
// fields in known payloads too: neither is invalid.
func TestSyncUnknownPayloadIgnored(t *testing.T) {
	d := servertest.Start(t, "")
	r := openRawSync(t, d.Socket)
	r.send(pcat(pvar(15, 1), psub(39, pstr(1, "from the future"))))
	// A known payload with fields unknown to this build (a newer sender).
	r.send(pcat(pvar(15, 2), psub(12, psub(1, pstr(2, "k8s"), pstr(3, "demo/x"), pstr(4, "eth0"), pstr(99, "new")), pvar(50, 1)), pvar(1000000, 7)))
	r.send(pcat(pvar(15, 3), psub(1)))
	testutil.WaitFor(t, 10*time.Second, "the unknown payload counted", func() bool {
		return d.Metric(t, "dpd_felix_unknown_payloads_total") == 1
	})
	testutil.WaitFor(t, 10*time.Second, "InSync received", func() bool {
		return d.MetricWhere(t, "dpd_messages_received_total", map[string]string{"payload": "in_sync"}) == 1
	})
	if n := d.MetricWhere(t, "dpd_messages_received_total", map[string]string{"payload": "workload_endpoint_remove"}); n != 1 {
		t.Fatalf("workload_endpoint_remove received: %v, want 1", n)
	}
	if n := d.Metric(t, "dpd_invalid_messages_total"); n != 0 {
		t.Fatalf("invalid messages: %v, want 0", n)
	}
}
