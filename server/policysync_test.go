package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/internal/testutil"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server"
	"github.com/dpd-dev/dpd/server/servertest"
)

// psEnv is a daemon serving policy sync and a controller stream into it.
type psEnv struct {
	d    *servertest.Daemon
	dir  string
	ctrl dpdv1.Dataplane_SyncClient
}

func newPSEnv(t *testing.T) *psEnv {
	t.Helper()
	dir, err := os.MkdirTemp("", "dpdps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	d := servertest.StartConfig(t, server.Config{PolicySyncDir: dir})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ctrl, err := dial(t, d.Socket).Dataplane().Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() { // statuses are not this test's business
		for {
			if _, err := ctrl.Recv(); err != nil {
				return
			}
		}
	}()
	return &psEnv{d: d, dir: dir, ctrl: ctrl}
}

func (e *psEnv) send(t *testing.T, msgs ...*felix.ToDataplane) {
	t.Helper()
	for _, m := range msgs {
		if err := e.ctrl.Send(m); err != nil {
			t.Fatal(err)
		}
	}
}

// addWorkload writes uid's credentials file as pod2daemon's flexvolume
// driver does (Go field names) and waits for dpd's socket.
func (e *psEnv) addWorkload(t *testing.T, uid, ns, pod string) string {
	t.Helper()
	creds := fmt.Sprintf(`{"UID":%q,"Workload":%q,"Namespace":%q,"ServiceAccount":"default"}`, uid, pod, ns)
	if err := os.WriteFile(filepath.Join(e.dir, "creds", uid+".json"), []byte(creds), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(e.dir, "mount", uid, "socket")
	testutil.WaitFor(t, 10*time.Second, "policy-sync socket "+sock, func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
	return sock
}

// syncClient connects to a workload socket with a client generated from
// the proto, default options (4 MiB receive limit, as Calico's clients).
func syncClient(t *testing.T, sock string) (felix.PolicySyncClient, felix.PolicySync_SyncClient) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := felix.NewPolicySyncClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Wait for ready, as Calico's clients retry: between bind and listen
	// the socket exists and refuses connections.
	stream, err := c.Sync(ctx, &felix.SyncRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	return c, stream
}

// recvUntil reads until stop says so; it fails on stream errors.
func recvUntil(t *testing.T, s felix.PolicySync_SyncClient, stop func(*felix.ToDataplane) bool) []*felix.ToDataplane {
	t.Helper()
	var out []*felix.ToDataplane
	for {
		m, err := s.Recv()
		if err != nil {
			t.Fatalf("policy-sync stream: %v after %d messages", err, len(out))
		}
		out = append(out, m)
		if stop(m) {
			return out
		}
	}
}

func isWEP(wl string) func(*felix.ToDataplane) bool {
	return func(m *felix.ToDataplane) bool { return m.GetWorkloadEndpointUpdate().GetId().GetWorkloadId() == wl }
}

// index of the first message matching pred, -1 if none.
func index(ms []*felix.ToDataplane, pred func(*felix.ToDataplane) bool) int {
	return slices.IndexFunc(ms, pred)
}

func psPolicy(name string, sets ...string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyUpdate{ActivePolicyUpdate: &felix.ActivePolicyUpdate{
		Id: &felix.PolicyID{Name: name}, Policy: &felix.Policy{InboundRules: []*felix.Rule{{Action: "allow", SrcIpSetIds: sets}}}}}}
}

func psIPSet(id string, members ...string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: id, Members: members}}}
}

func psWEP(ns, pod, iface string, policies ...string) *felix.ToDataplane {
	ti := &felix.TierInfo{Name: "default"}
	for _, p := range policies {
		ti.IngressPolicies = append(ti.IngressPolicies, &felix.PolicyID{Name: p})
	}
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
		Id:       &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: ns + "/" + pod, EndpointId: "eth0"},
		Endpoint: &felix.WorkloadEndpoint{State: "active", Name: iface, Tiers: []*felix.TierInfo{ti}}}}}
}

func isPolicy(name string) func(*felix.ToDataplane) bool {
	return func(m *felix.ToDataplane) bool { return m.GetActivePolicyUpdate().GetId().GetName() == name }
}

// mentions reports whether s appears anywhere in m's encoding.
func mentions(m *felix.ToDataplane, s string) bool {
	b, _ := proto.Marshal(m)
	return strings.Contains(string(b), s)
}

// TestPolicySyncSubset drives dpd's per-workload sockets with a client
// generated from the proto: a's stream carries a's subset only, in Calico's
// order, a >4 MiB IP set arrives split, a reconnect supersedes the older
// stream, Report is acknowledged and counted, and removing the credentials
// closes the socket.
func TestPolicySyncSubset(t *testing.T) {
	e := newPSEnv(t)
	big := make([]string, 400_000) // ~5 MiB of members
	for i := range big {
		big[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
	}
	e.send(t,
		psIPSet("a-set", "192.168.0.1"), psIPSet("b-set", "192.168.0.2"), psIPSet("big-set", big...),
		psPolicy("pol-a", "a-set", "big-set"), psPolicy("pol-b", "b-set"),
		psWEP("ns1", "pod-a", "calia", "pol-a"), psWEP("ns2", "pod-b", "calib", "pol-b"),
		&felix.ToDataplane{Payload: &felix.ToDataplane_ServiceAccountUpdate{ServiceAccountUpdate: &felix.ServiceAccountUpdate{
			Id: &felix.ServiceAccountID{Namespace: "ns1", Name: "default"}}}},
		&felix.ToDataplane{Payload: &felix.ToDataplane_NamespaceUpdate{NamespaceUpdate: &felix.NamespaceUpdate{Id: &felix.NamespaceID{Name: "ns1"}}}},
		&felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}},
	)
	sockA := e.addWorkload(t, "uid-a", "ns1", "pod-a")
	_, streamA := syncClient(t, sockA)
	got := recvUntil(t, streamA, func(m *felix.ToDataplane) bool { return m.GetInSync() != nil })

	for _, m := range got {
		for _, other := range []string{"pol-b", "b-set", "ns2/pod-b"} {
			if mentions(m, other) {
				t.Errorf("a's stream carries %q: %v", other, m.GetPayload())
			}
		}
		if n := proto.Size(m); n > 4<<20 {
			t.Errorf("a %d-byte message exceeds 4 MiB", n)
		}
	}
	wepAt, polAt := index(got, isWEP("ns1/pod-a")), index(got, isPolicy("pol-a"))
	if wepAt < 0 || polAt < 0 || polAt > wepAt {
		t.Fatalf("policy at %d, endpoint at %d: the policy must come first", polAt, wepAt)
	}
	var bigMembers, bigMsgs int
	for i, m := range got {
		if u := m.GetIpsetUpdate(); u.GetId() == "big-set" {
			bigMembers += len(u.GetMembers())
			bigMsgs++
		}
		if d := m.GetIpsetDeltaUpdate(); d.GetId() == "big-set" {
			bigMembers += len(d.GetAddedMembers())
			bigMsgs++
			if i > polAt {
				t.Errorf("part of big-set after the policy that uses it")
			}
		}
	}
	if bigMsgs < 2 || bigMembers != len(big) {
		t.Fatalf("big-set arrived in %d messages with %d members, want >= 2 messages with %d", bigMsgs, bigMembers, len(big))
	}
	if index(got, func(m *felix.ToDataplane) bool { return m.GetServiceAccountUpdate() != nil }) < 0 ||
		index(got, func(m *felix.ToDataplane) bool { return m.GetNamespaceUpdate() != nil }) < 0 {
		t.Errorf("service account or namespace missing: %d messages", len(got))
	}

	// a moves to pol-b: pol-b before the endpoint, pol-a's removal after.
	e.send(t, psWEP("ns1", "pod-a", "calia", "pol-b"))
	got = recvUntil(t, streamA, func(m *felix.ToDataplane) bool { return m.GetIpsetRemove().GetId() == "big-set" })
	wepAt = index(got, isWEP("ns1/pod-a"))
	addAt := index(got, isPolicy("pol-b"))
	rmAt := index(got, func(m *felix.ToDataplane) bool { return m.GetActivePolicyRemove().GetId().GetName() == "pol-a" })
	if addAt < 0 || addAt > wepAt || wepAt > rmAt {
		t.Fatalf("order after the change: pol-b %d, endpoint %d, pol-a removal %d", addAt, wepAt, rmAt)
	}

	// A reconnect supersedes the older stream and gets a full sync.
	client2, stream2 := syncClient(t, sockA)
	recvUntil(t, stream2, func(m *felix.ToDataplane) bool { return m.GetInSync() != nil })
	if _, err := recvAfterDrain(streamA); status.Code(err) != codes.Aborted {
		t.Fatalf("older stream ended with %v, want Aborted", err)
	}

	res, err := client2.Report(context.Background(), &felix.DataplaneStats{SrcIp: "10.0.0.1", Action: felix.Action_DENIED})
	if err != nil || !res.GetSuccessful() {
		t.Fatalf("Report = %v, %v", res, err)
	}
	if v := e.d.Metric(t, "dpd_policysync_reports_total"); v != 1 {
		t.Errorf("dpd_policysync_reports_total = %v, want 1", v)
	}

	// Removing the credentials closes the socket and its streams.
	if err := os.Remove(filepath.Join(e.dir, "creds", "uid-a.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := recvAfterDrain(stream2); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("stream after the credentials went: %v, want an error", err)
	}
	testutil.WaitFor(t, 10*time.Second, "socket removed", func() bool {
		_, err := os.Stat(sockA)
		return os.IsNotExist(err)
	})
}

// recvAfterDrain reads until the stream ends and returns how.
func recvAfterDrain(s felix.PolicySync_SyncClient) (int, error) {
	n := 0
	for {
		if _, err := s.Recv(); err != nil {
			return n, err
		}
		n++
	}
}

// TestPolicySyncEndpointRemoved: the endpoint's removal is sent and then
// the stream ends cleanly, as Calico's server does.
func TestPolicySyncEndpointRemoved(t *testing.T) {
	e := newPSEnv(t)
	e.send(t, psPolicy("p"), psWEP("ns", "w", "caliw", "p"), &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}})
	_, stream := syncClient(t, e.addWorkload(t, "uid-w", "ns", "w"))
	recvUntil(t, stream, func(m *felix.ToDataplane) bool { return m.GetInSync() != nil })
	e.send(t, &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{
		Id: &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "ns/w", EndpointId: "eth0"}}}})
	m, err := stream.Recv()
	if err != nil || m.GetWorkloadEndpointRemove() == nil {
		t.Fatalf("after the removal: %v %v", m, err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}
}
