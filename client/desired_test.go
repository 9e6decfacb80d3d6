package client

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/proto/felix"
)

func wep(name string, nets ...string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointUpdate{WorkloadEndpointUpdate: &felix.WorkloadEndpointUpdate{
		Id:       &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: name, EndpointId: "eth0"},
		Endpoint: &felix.WorkloadEndpoint{Name: "cali-" + name, Ipv4Nets: nets},
	}}}
}

func wepRemove(name string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_WorkloadEndpointRemove{WorkloadEndpointRemove: &felix.WorkloadEndpointRemove{
		Id: &felix.WorkloadEndpointID{OrchestratorId: "k8s", WorkloadId: name, EndpointId: "eth0"},
	}}}
}

func set(id string, members ...string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: id, Members: members}}}
}

func setRemove(id string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetRemove{IpsetRemove: &felix.IPSetRemove{Id: id}}}
}

func delta(id string, added, removed []string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{
		Id: id, AddedMembers: added, RemovedMembers: removed,
	}}}
}

var inSync = &felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}}

// render names a replayed message and its content for comparison.
func render(m *felix.ToDataplane) string {
	key, _ := identity(m)
	switch {
	case m.GetIpsetUpdate() != nil:
		return fmt.Sprintf("%s %v", key, m.GetIpsetUpdate().GetMembers())
	case m.GetWorkloadEndpointUpdate() != nil:
		return fmt.Sprintf("%s %v", key, m.GetWorkloadEndpointUpdate().GetEndpoint().GetIpv4Nets())
	}
	return key
}

func TestDesiredReplay(t *testing.T) {
	tests := []struct {
		name     string
		snapshot []*felix.ToDataplane
		sent     []*felix.ToDataplane
		want     []string
	}{
		{
			name:     "snapshot only, InSync dropped",
			snapshot: []*felix.ToDataplane{set("s1", "a"), wep("w1", "n1"), inSync},
			want:     []string{"ipset:s1 [a]", "wep:k8s/w1/eth0 [n1]"},
		},
		{
			name:     "sent update adds and wins",
			snapshot: []*felix.ToDataplane{wep("w1", "n1"), wep("w2", "n1")},
			sent:     []*felix.ToDataplane{wep("w3", "n3"), wep("w1", "n2")},
			want:     []string{"wep:k8s/w1/eth0 [n2]", "wep:k8s/w2/eth0 [n1]", "wep:k8s/w3/eth0 [n3]"},
		},
		{
			name:     "sent remove wins over snapshot",
			snapshot: []*felix.ToDataplane{wep("w1", "n1"), wep("w2", "n1")},
			sent:     []*felix.ToDataplane{wepRemove("w1")},
			want:     []string{"wep:k8s/w2/eth0 [n1]"},
		},
		{
			name:     "removed then re-added",
			snapshot: []*felix.ToDataplane{wep("w1", "n1")},
			sent:     []*felix.ToDataplane{wepRemove("w1"), wep("w1", "n3")},
			want:     []string{"wep:k8s/w1/eth0 [n3]"},
		},
		{
			name:     "snapshot already current",
			snapshot: []*felix.ToDataplane{wep("w1", "n2")},
			sent:     []*felix.ToDataplane{wep("w1", "n2")},
			want:     []string{"wep:k8s/w1/eth0 [n2]"},
		},
		{
			name:     "deltas fold into the snapshot's set",
			snapshot: []*felix.ToDataplane{set("s1", "a", "b")},
			sent:     []*felix.ToDataplane{delta("s1", []string{"c"}, []string{"a"}), delta("s1", []string{"d"}, []string{"c"})},
			want:     []string{"ipset:s1 [b d]"},
		},
		{
			name: "deltas fold into a sent set",
			sent: []*felix.ToDataplane{set("s2", "x"), delta("s2", []string{"y"}, nil), delta("s2", nil, []string{"x"})},
			want: []string{"ipset:s2 [y]"},
		},
		{
			name:     "snapshot deltas fold too",
			snapshot: []*felix.ToDataplane{set("s1", "a"), delta("s1", []string{"b"}, nil)},
			want:     []string{"ipset:s1 [a b]"},
		},
		{
			name: "delta to an unknown set is no state",
			sent: []*felix.ToDataplane{delta("s9", []string{"a"}, nil)},
			want: nil,
		},
		{
			name:     "delta to a removed set stays removed",
			snapshot: []*felix.ToDataplane{set("s1", "a")},
			sent:     []*felix.ToDataplane{setRemove("s1"), delta("s1", []string{"b"}, nil)},
			want:     nil,
		},
		{
			name:     "full update after deltas replaces them",
			snapshot: []*felix.ToDataplane{set("s1", "a")},
			sent:     []*felix.ToDataplane{delta("s1", []string{"b"}, nil), set("s1", "z")},
			want:     []string{"ipset:s1 [z]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDesired()
			for _, m := range tt.sent {
				d.record(m)
			}
			var got []string
			for _, m := range d.replay(tt.snapshot) {
				got = append(got, render(m))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("replay =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// TestDesiredReplayCopiesSnapshot: the replay may set sequence numbers and
// fold deltas; the caller's snapshot messages must not change.
func TestDesiredReplayCopiesSnapshot(t *testing.T) {
	snap := []*felix.ToDataplane{set("s1", "a")}
	d := newDesired()
	d.record(delta("s1", []string{"b"}, nil))
	for _, m := range d.replay(snap) {
		m.SequenceNumber = 7
	}
	if got := snap[0].GetIpsetUpdate().GetMembers(); !slices.Equal(got, []string{"a"}) || snap[0].SequenceNumber != 0 {
		t.Errorf("snapshot changed to %v seq %d", got, snap[0].SequenceNumber)
	}
}

// TestIdentityCoversEveryPayload: every ToDataplane payload but InSync has
// an identity, so Send never silently leaves state out of a replay.
func TestIdentityCoversEveryPayload(t *testing.T) {
	oneof := (&felix.ToDataplane{}).ProtoReflect().Descriptor().Oneofs().ByName("payload")
	for i := range oneof.Fields().Len() {
		fd := oneof.Fields().Get(i)
		m := &felix.ToDataplane{}
		msg := m.ProtoReflect()
		msg.Set(fd, msg.NewField(fd))
		key, _ := identity(m)
		if (key == "") != (fd.Name() == "in_sync") {
			t.Errorf("identity(%s) = %q", fd.Name(), key)
		}
	}
}
