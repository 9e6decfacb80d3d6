package server_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/servertest"
)

// TestListIPSetsBounded: however many members a request asks for, an
// answer carries at most 1000 per set and 10000 in all, and paging one set
// by its token shows every member exactly once, in order.
func TestListIPSetsBounded(t *testing.T) {
	d := servertest.Start(t, "")
	c := dial(t, d.Socket)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := c.Dataplane().Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const bigMembers, smallSets, smallMembers = 2500, 12, 1000
	send := func(m *felix.ToDataplane) {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	setOf := func(id string, n, base int) *felix.ToDataplane {
		ms := make([]string, n)
		for i := range ms {
			ms[i] = fmt.Sprintf("10.%d.%d.%d", base, i/256, i%256)
		}
		return &felix.ToDataplane{Payload: &felix.ToDataplane_IpsetUpdate{IpsetUpdate: &felix.IPSetUpdate{Id: id, Members: ms}}}
	}
	send(setOf("big", bigMembers, 1))
	for i := range smallSets {
		send(setOf(fmt.Sprintf("small-%02d", i), smallMembers, 10+i))
	}
	send(&felix.ToDataplane{Payload: &felix.ToDataplane_InSync{InSync: &felix.InSync{}}})
	for {
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.GetDataplaneInSync() != nil {
			break
		}
	}
	ic := c.Inspect()

	all, err := ic.ListIPSets(ctx, &dpdv1.ListIPSetsRequest{MaxMembers: math.MaxUint32})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range all.GetIpSets() {
		total += len(s.GetMembers())
		if len(s.GetMembers()) > 1000 {
			t.Errorf("set %s shows %d members, want at most 1000", s.GetId(), len(s.GetMembers()))
		}
	}
	if len(all.GetIpSets()) != 1+smallSets || total != 10000 {
		t.Errorf("listing all: %d sets with %d members, want %d sets with 10000 members", len(all.GetIpSets()), total, 1+smallSets)
	}
	size := proto.Size(all)
	if size > 1<<20 {
		t.Errorf("answer is %d bytes", size)
	}
	t.Logf("max_members=2^32-1 over %d members: %d members, %d bytes", bigMembers+smallSets*smallMembers, total, size)

	// Page through the big set.
	seen := map[string]bool{}
	var prev string
	req := &dpdv1.ListIPSetsRequest{Id: "big", MaxMembers: math.MaxUint32}
	for pages := 1; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		resp, err := ic.ListIPSets(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		s := resp.GetIpSets()[0]
		if s.GetMemberCount() != bigMembers || len(s.GetMembers()) > 1000 {
			t.Fatalf("page %d: count %d, %d members", pages, s.GetMemberCount(), len(s.GetMembers()))
		}
		for _, m := range s.GetMembers() {
			if seen[m] {
				t.Fatalf("page %d shows %s again", pages, m)
			}
			seen[m] = true
			prev = m
		}
		if req.PageToken = s.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if len(seen) != bigMembers || prev != "10.1.9.195" {
		t.Errorf("paging showed %d members ending with %s, want %d ending with 10.1.9.195", len(seen), prev, bigMembers)
	}

	for _, bad := range []*dpdv1.ListIPSetsRequest{
		{PageToken: all.GetIpSets()[0].GetNextPageToken()}, // no id
		{Id: "big", PageToken: "not a token"},
	} {
		if _, err := ic.ListIPSets(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("ListIPSets(%v) = %v, want InvalidArgument", bad, err)
		}
	}
}
