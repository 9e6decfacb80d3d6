package engine

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// TestIPSetOpsMatchModel sends random sequences of IPSetUpdate,
// IPSetDeltaUpdate and IPSetRemove, and checks after each flush that the
// kernel and the Inspect listing hold exactly what a plain model of the
// sets says. Some deltas are large enough to make the engine fold them
// into a replace.
func TestIPSetOpsMatchModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pool := make([]string, 3000)
	for i := range pool {
		pool[i] = fmt.Sprintf("10.%d.%d.%d", i%3, i/250%250, i%250+1)
	}
	pick := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = pool[rng.IntN(len(pool))]
		}
		return out
	}
	size := func() int {
		if rng.IntN(8) == 0 {
			return 1000 + rng.IntN(2000) // past the engine's fold threshold
		}
		return rng.IntN(6)
	}
	h := newHarness(t)
	h.session()
	h.send(inSync())
	ref := map[string]map[string]bool{}
	for step := range 300 {
		id := fmt.Sprintf("s:%d", rng.IntN(4))
		var msg *felix.ToDataplane
		switch op := rng.IntN(10); {
		case op < 3 || ref[id] == nil:
			ms := pick(size())
			msg = ipset(id, ms...)
			ref[id] = map[string]bool{}
			for _, m := range ms {
				ref[id][m] = true
			}
		case op < 9:
			added, removed := pick(size()), pick(size())
			msg = ipsetDelta(id, added, removed)
			for _, m := range removed {
				delete(ref[id], m)
			}
			for _, m := range added {
				ref[id][m] = true
			}
		default:
			msg = ipsetRemove(id)
			delete(ref, id)
		}
		h.send(msg)
		checkIPSets(t, h, fmt.Sprintf("step %d", step), ref)
	}
	h.noViolations()
}

func checkIPSets(t *testing.T, h *harness, step string, ref map[string]map[string]bool) {
	t.Helper()
	got := h.k.IPSets()
	if len(got) != len(ref) {
		t.Fatalf("%s: kernel has %d sets, want %d", step, len(got), len(ref))
	}
	infos, err := h.e.IPSets(context.Background(), IPSetQuery{MaxMembers: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		want, err := felixconv.IPSetMembers(felix.IPSetUpdate_IP, slices.Collect(maps.Keys(ref[info.ID])))
		if err != nil {
			t.Fatal(err)
		}
		model.SortMembers(want)
		if set := got[info.ID]; !slices.Equal(set.Members, want) && len(set.Members)+len(want) > 0 {
			t.Fatalf("%s: kernel set %s has %d members, want %d", step, info.ID, len(set.Members), len(want))
		}
		var first []string
		for _, m := range want[:min(5, len(want))] {
			first = append(first, MemberString(m))
		}
		if info.MemberCount != len(want) || !slices.Equal(info.Members, first) {
			t.Fatalf("%s: Inspect lists %s with %d members %v, want %d %v", step, info.ID, info.MemberCount,
				info.Members, len(want), first)
		}
		// Paging through the set shows every member once, in order.
		var all []string
		q := IPSetQuery{ID: info.ID, MaxMembers: 3}
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("%s: paging %s does not end", step, info.ID)
			}
			page, err := h.e.IPSets(context.Background(), q)
			if err != nil || len(page) != 1 {
				t.Fatalf("%s: page of %s: %+v, %v", step, info.ID, page, err)
			}
			all = append(all, page[0].Members...)
			if q.PageToken = page[0].NextPage; q.PageToken == "" {
				break
			}
		}
		var every []string
		for _, m := range want {
			every = append(every, MemberString(m))
		}
		if !slices.Equal(all, every) {
			t.Fatalf("%s: paging %s gave %d members, want %d", step, info.ID, len(all), len(every))
		}
	}
	if len(infos) != len(ref) {
		t.Fatalf("%s: Inspect lists %d sets, want %d", step, len(infos), len(ref))
	}
}
