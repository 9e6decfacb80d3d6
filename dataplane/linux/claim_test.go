package linux

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// TestClaimBeforeSetChange: after a restart, a pinned program that
// classifies by IP sets keeps matching an address whose combination of
// sets changed while dpd was down, from the IP set write on, once it is
// claimed first (as the engine does before a pass's IP set changes).
// Unclaimed, the same write maps the address to a combination the program
// has no entry for, and its allow-from-set rule stops matching.
func TestClaimBeforeSetChange(t *testing.T) {
	for _, claim := range []bool{true, false} {
		name := map[bool]string{true: "claimed", false: "unclaimed"}[claim]
		t.Run(name, func(t *testing.T) { testClaimBeforeSetChange(t, claim) })
	}
}

func testClaimBeforeSetChange(t *testing.T, claim bool) {
	pin := newPinDir(t)
	k1 := openKernel(t, pin)
	watch(t, k1)
	n := map[bool]int{true: 30, false: 31}[claim]
	a, b := newWorkload(t, fmt.Sprintf("10.77.%d.1", n)), newWorkload(t, fmt.Sprintf("10.77.%d.2", n))
	aNet := []model.IPSetMember{{Prefix: netip.MustParsePrefix(a.IP + "/32")}}
	other := []model.IPSetMember{{Prefix: netip.MustParsePrefix("10.99.0.0/16")}}
	mustNil(t, k1.ReplaceIPSet("s:one", model.IPSetNet, aNet))
	mustNil(t, k1.ReplaceIPSet("s:two", model.IPSetNet, other))
	// Two rules on source sets: the program classifies by combination.
	icmp := uint8(1)
	in := model.DirectionPolicy{Tiers: []model.Tier{{Name: "t", DefaultAction: model.ActionDeny,
		Policies: []model.PolicyRules{{Name: "t/p", Kind: "policy", Rules: []model.Rule{
			{Action: model.ActionAllow, Protocol: &icmp, SrcIPSets: []string{"s:one"}},
			{Action: model.ActionAllow, Protocol: &icmp, SrcIPSets: []string{"s:two"}},
		}}}}}}
	epA, epB := allowAllEndpoint(a, 1), endpointFor(b, 2, in, allowAll())
	mustApply(t, k1, epA, epB)
	testutil.WaitFor(t, 5*time.Second, "a pings b", func() bool { return pingsQuick(a, b.IP) })
	mustNil(t, k1.Close())

	k2 := openKernel(t, pin)
	watch(t, k2)
	if !k2.UnclaimedPinnedPolicies() {
		t.Fatal("no unclaimed pinned programs after the restart")
	}
	if claim {
		k2.AdoptPinnedPolicies([]*model.Endpoint{epA, epB})
	}
	// While dpd was down a joined s:two too: {s:one, s:two} is a new
	// combination.
	mustNil(t, k2.ReplaceIPSet("s:one", model.IPSetNet, aNet))
	mustNil(t, k2.ReplaceIPSet("s:two", model.IPSetNet, append(other, aNet...)))
	got := pingsQuick(a, b.IP)
	if claim && !got {
		t.Fatal("a claimed program stopped allowing a after its set change")
	}
	if !claim && got {
		t.Fatal("the unclaimed case no longer shows the gap: the test proves nothing")
	}
	before := k2.Ops()
	mustApply(t, k2, epA, epB)
	if ops := k2.Ops().Sub(before); ops.ProgramLoads != 0 || ops.JumpWrites != 0 {
		t.Errorf("applying the endpoints after the claim: %+v, want no load and no jump write", ops)
	}
	if !pingsQuick(a, b.IP) {
		t.Error("a cannot ping b once the endpoints are applied")
	}
}
