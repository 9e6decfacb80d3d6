package policysync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// td wraps a Felix payload message in a ToDataplane.
func td(p proto.Message) *felix.ToDataplane { return testutil.ToDataplane(p) }

func ipset(id string, members ...string) *felix.ToDataplane {
	return td(&felix.IPSetUpdate{Id: id, Members: members})
}

func pol(name string, sets ...string) *felix.ToDataplane {
	return td(&felix.ActivePolicyUpdate{Id: &felix.PolicyID{Name: name},
		Policy: &felix.Policy{InboundRules: []*felix.Rule{{Action: "allow", SrcIpSetIds: sets}}}})
}

func prof(name string) *felix.ToDataplane {
	return td(&felix.ActiveProfileUpdate{Id: &felix.ProfileID{Name: name}, Profile: &felix.Profile{}})
}

func wep(ns, pod string, pols []string, profs ...string) *felix.ToDataplane {
	ti := &felix.TierInfo{Name: "default"}
	for _, p := range pols {
		ti.IngressPolicies = append(ti.IngressPolicies, &felix.PolicyID{Name: p})
	}
	return td(&felix.WorkloadEndpointUpdate{
		Id:       &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: ns + "/" + pod, EndpointId: "eth0"},
		Endpoint: &felix.WorkloadEndpoint{State: "active", Name: "cali" + pod, Tiers: []*felix.TierInfo{ti}, ProfileIds: profs},
	})
}

func wid(ns, pod string) model.WorkloadID {
	return model.WorkloadID{Orchestrator: "k8s", Workload: ns + "/" + pod, Endpoint: "eth0"}
}

// drain reads what is queued now.
func drain(t *testing.T, s *Subscription) []*felix.ToDataplane {
	t.Helper()
	var out []*felix.ToDataplane
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		m, err := s.Next(ctx)
		cancel()
		if err != nil {
			return out
		}
		out = append(out, m)
	}
}

// describe names each message by kind and id, for order assertions.
func describe(ms []*felix.ToDataplane) []string {
	var out []string
	for _, m := range ms {
		k := felixconv.PayloadKind(m)
		switch p := m.GetPayload().(type) {
		case *felix.ToDataplane_IpsetUpdate:
			k += ":" + p.IpsetUpdate.GetId()
		case *felix.ToDataplane_IpsetDeltaUpdate:
			k += ":" + p.IpsetDeltaUpdate.GetId()
		case *felix.ToDataplane_IpsetRemove:
			k += ":" + p.IpsetRemove.GetId()
		case *felix.ToDataplane_ActivePolicyUpdate:
			k += ":" + p.ActivePolicyUpdate.GetId().GetName()
		case *felix.ToDataplane_ActivePolicyRemove:
			k += ":" + p.ActivePolicyRemove.GetId().GetName()
		case *felix.ToDataplane_ActiveProfileUpdate:
			k += ":" + p.ActiveProfileUpdate.GetId().GetName()
		case *felix.ToDataplane_ActiveProfileRemove:
			k += ":" + p.ActiveProfileRemove.GetId().GetName()
		case *felix.ToDataplane_WorkloadEndpointUpdate:
			k += ":" + p.WorkloadEndpointUpdate.GetId().GetWorkloadId()
		case *felix.ToDataplane_WorkloadEndpointRemove:
			k += ":" + p.WorkloadEndpointRemove.GetId().GetWorkloadId()
		}
		out = append(out, k)
	}
	return out
}

func kinds(t *testing.T) (map[string]string, string) {
	t.Helper()
	// PayloadKind spellings, so the expectations below read naturally.
	return map[string]string{
		"set":  felixconv.PayloadKind(ipset("x")),
		"pol":  felixconv.PayloadKind(pol("x")),
		"prof": felixconv.PayloadKind(prof("x")),
		"wep":  felixconv.PayloadKind(wep("n", "p", nil)),
	}, felixconv.PayloadKind(td(&felix.InSync{}))
}

func TestSubsetAndOrder(t *testing.T) {
	p := NewProcessor(Options{})
	k, inSync := kinds(t)
	p.StartEpoch()
	for _, m := range []*felix.ToDataplane{
		ipset("s-a", "10.0.0.1"), ipset("s-b", "10.0.0.2"), ipset("s-shared", "10.0.0.3"),
		pol("pol-a", "s-a", "s-shared"), pol("pol-b", "s-b", "s-shared"), prof("prof-a"), prof("prof-b"),
		wep("ns1", "a", []string{"pol-a"}, "prof-a"), wep("ns2", "b", []string{"pol-b"}, "prof-b"),
		td(&felix.NamespaceUpdate{Id: &felix.NamespaceID{Name: "ns1"}}),
		td(&felix.InSync{}),
	} {
		p.OnUpdate(m)
	}
	sub := p.Join(wid("ns1", "a"))
	got := describe(drain(t, sub))
	want := []string{
		k["set"] + ":s-a", k["set"] + ":s-shared", k["pol"] + ":pol-a", k["prof"] + ":prof-a", k["wep"] + ":ns1/a",
		felixconv.PayloadKind(td(&felix.NamespaceUpdate{})), inSync,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("join sync:\n got %v\nwant %v", got, want)
	}

	// Another workload's changes never reach a; a shared set's delta does.
	p.OnUpdate(pol("pol-b", "s-b"))
	p.OnUpdate(td(&felix.IPSetDeltaUpdate{Id: "s-b", AddedMembers: []string{"10.9.9.9"}}))
	p.OnUpdate(td(&felix.IPSetDeltaUpdate{Id: "s-shared", AddedMembers: []string{"10.9.9.8"}}))
	if got := describe(drain(t, sub)); !slices.Equal(got, []string{felixconv.PayloadKind(td(&felix.IPSetDeltaUpdate{})) + ":s-shared"}) {
		t.Fatalf("after other workloads' changes a got %v", got)
	}

	// a moves to pol-b: the new set and policy before the endpoint, the
	// old policy and sets removed after it.
	p.OnUpdate(wep("ns1", "a", []string{"pol-b"}, "prof-a"))
	got = describe(drain(t, sub))
	polRemove := felixconv.PayloadKind(&felix.ToDataplane{Payload: &felix.ToDataplane_ActivePolicyRemove{ActivePolicyRemove: &felix.ActivePolicyRemove{}}})
	setRemove := felixconv.PayloadKind(&felix.ToDataplane{Payload: &felix.ToDataplane_IpsetRemove{IpsetRemove: &felix.IPSetRemove{}}})
	want = []string{k["set"] + ":s-b", k["pol"] + ":pol-b", k["wep"] + ":ns1/a", polRemove + ":pol-a", setRemove + ":s-a", setRemove + ":s-shared"}
	if !slices.Equal(got, want) {
		t.Fatalf("policy change:\n got %v\nwant %v", got, want)
	}
}

func TestReconnectAndRemove(t *testing.T) {
	p := NewProcessor(Options{})
	p.OnUpdate(prof("p"))
	p.OnUpdate(wep("ns", "a", nil, "p"))
	first := p.Join(wid("ns", "a"))
	second := p.Join(wid("ns", "a"))
	drain(t, first)
	if _, err := first.Next(context.Background()); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("older stream ended with %v, want ErrSuperseded", err)
	}
	drain(t, second)
	p.OnUpdate(td(&felix.WorkloadEndpointRemove{Id: &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: "ns/a", EndpointId: "eth0"}}))
	m, err := second.Next(context.Background())
	if err != nil || m.GetWorkloadEndpointRemove() == nil {
		t.Fatalf("after remove: %v %v, want the WorkloadEndpointRemove", m, err)
	}
	if _, err := second.Next(context.Background()); !errors.Is(err, ErrEndpointRemoved) {
		t.Fatalf("stream ended with %v, want ErrEndpointRemoved", err)
	}
}

// A new controller session that re-sends everything unchanged sends
// nothing new; what it leaves out is removed at its InSync.
func TestEpochResendAndSweep(t *testing.T) {
	p := NewProcessor(Options{})
	state := []*felix.ToDataplane{ipset("s", "10.0.0.1"), pol("pol", "s"), wep("ns", "a", []string{"pol"}),
		td(&felix.NamespaceUpdate{Id: &felix.NamespaceID{Name: "ns"}}), td(&felix.NamespaceUpdate{Id: &felix.NamespaceID{Name: "gone"}})}
	p.StartEpoch()
	for _, m := range append(state, td(&felix.InSync{})) {
		p.OnUpdate(m)
	}
	sub := p.Join(wid("ns", "a"))
	drain(t, sub)
	p.StartEpoch()
	for _, m := range state[:4] {
		p.OnUpdate(proto.Clone(m).(*felix.ToDataplane))
	}
	if got := drain(t, sub); len(got) != 0 {
		t.Fatalf("unchanged re-send produced %v", describe(got))
	}
	p.OnUpdate(td(&felix.InSync{}))
	got := drain(t, sub)
	if len(got) != 1 || got[0].GetNamespaceRemove().GetId().GetName() != "gone" {
		t.Fatalf("sweep sent %v, want only the removal of namespace gone", got)
	}
}

func TestSlowClientDisconnected(t *testing.T) {
	p := NewProcessor(Options{QueueLimit: 3})
	p.OnUpdate(wep("ns", "a", nil))
	sub := p.Join(wid("ns", "a"))
	for i := range 5 {
		p.OnUpdate(td(&felix.NamespaceUpdate{Id: &felix.NamespaceID{Name: fmt.Sprint(i)}}))
	}
	if _, err := sub.Next(context.Background()); !errors.Is(err, ErrTooSlow) {
		t.Fatalf("overflowed client: %v, want ErrTooSlow", err)
	}
	p.mu.Lock()
	detached := p.eps[wid("ns", "a")].sub == nil
	p.mu.Unlock()
	if !detached {
		t.Fatal("overflowed client still attached")
	}
}

func TestSplitIPSet(t *testing.T) {
	const limit = 4096
	var members []string
	for i := range 2000 {
		members = append(members, fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	msgs := splitIPSetUpdate("big", felix.IPSetUpdate_IP, members, limit)
	if len(msgs) < 2 || msgs[0].GetIpsetUpdate() == nil {
		t.Fatalf("split into %d messages, first %T", len(msgs), msgs[0].GetPayload())
	}
	var all []string
	for i, m := range msgs {
		if n := proto.Size(m); n > limit {
			t.Fatalf("message %d is %d bytes, limit %d", i, n, limit)
		}
		if i == 0 {
			all = append(all, m.GetIpsetUpdate().GetMembers()...)
			continue
		}
		if m.GetIpsetDeltaUpdate() == nil || len(m.GetIpsetDeltaUpdate().GetRemovedMembers()) > 0 {
			t.Fatalf("message %d is %v, want an additions-only delta", i, m)
		}
		all = append(all, m.GetIpsetDeltaUpdate().GetAddedMembers()...)
	}
	if !slices.Equal(all, members) {
		t.Fatalf("split lost members: %d of %d", len(all), len(members))
	}
	if msgs := splitIPSetUpdate("empty", felix.IPSetUpdate_NET, nil, limit); len(msgs) != 1 || msgs[0].GetIpsetUpdate().GetType() != felix.IPSetUpdate_NET {
		t.Fatalf("empty set: %v", msgs)
	}
	deltas := splitIPSetDelta("big", members[:1000], members[1000:], limit)
	adds, removes := 0, 0
	for _, m := range deltas {
		if proto.Size(m) > limit {
			t.Fatalf("delta of %d bytes", proto.Size(m))
		}
		adds += len(m.GetIpsetDeltaUpdate().GetAddedMembers())
		removes += len(m.GetIpsetDeltaUpdate().GetRemovedMembers())
	}
	if adds != 1000 || removes != 1000 {
		t.Fatalf("delta split: %d adds, %d removes", adds, removes)
	}
}
