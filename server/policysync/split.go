package policysync

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dpd-dev/dpd/proto/felix"
)

// MaxMessageBytes is the largest message sent to a client: gRPC's default
// receive limit, which Calico's clients keep.
const MaxMessageBytes = 4 << 20

// slack covers the wrapper's length prefix growing as members are added.
const slack = 16

// memberCost is what one repeated-string element adds to a message.
func memberCost(m string) int { return 1 + protowire.SizeVarint(uint64(len(m))) + len(m) }

// chunk splits members so that base plus a chunk stays within limit. There
// is always at least one (possibly empty) chunk.
func chunk(members []string, base, limit int) [][]string {
	out := [][]string{}
	start, size := 0, base
	for i, m := range members {
		c := memberCost(m)
		if size+c > limit && i > start {
			out = append(out, members[start:i])
			start, size = i, base
		}
		size += c
	}
	return append(out, members[start:])
}

// splitIPSetUpdate sends a whole set: an IPSetUpdate with as many members
// as fit, then IPSetDeltaUpdates adding the rest.
func splitIPSetUpdate(id string, typ felix.IPSetUpdate_IPSetType, members []string, limit int) []*felix.ToDataplane {
	first := &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: id, Type: typ}}}
	deltaBase := proto.Size(deltaMsg(id, nil, nil)) + slack
	firstBase := proto.Size(first) + slack
	head := chunk(members, firstBase, limit)[0]
	first.GetIpsetUpdate().Members = head
	out := []*felix.ToDataplane{first}
	if rest := members[len(head):]; len(rest) > 0 {
		for _, c := range chunk(rest, deltaBase, limit) {
			out = append(out, deltaMsg(id, c, nil))
		}
	}
	return out
}

// splitIPSetDelta splits a delta: additions first, then removals, each
// message within limit. The two lists are disjoint, so the order within
// the delta does not matter.
func splitIPSetDelta(id string, added, removed []string, limit int) []*felix.ToDataplane {
	base := proto.Size(deltaMsg(id, nil, nil)) + slack
	var out []*felix.ToDataplane
	if len(added) > 0 {
		for _, c := range chunk(added, base, limit) {
			out = append(out, deltaMsg(id, c, nil))
		}
	}
	if len(removed) > 0 {
		for _, c := range chunk(removed, base, limit) {
			out = append(out, deltaMsg(id, nil, c))
		}
	}
	return out
}

func deltaMsg(id string, added, removed []string) *felix.ToDataplane {
	return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetDeltaUpdate{IpsetDeltaUpdate: &felix.IPSetDeltaUpdate{
		Id: id, AddedMembers: added, RemovedMembers: removed}}}
}
