package linux

import (
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// On the real datapath: b and c share their policy group's slot, so b's
// apply of a deny policy stops traffic to c before c's own apply, which
// then writes nothing; a restart adopts the shared slot without a write.
func TestPolicyGroupSharesSlotInKernel(t *testing.T) {
	pin := newPinDir(t)
	k := openKernel(t, pin)
	a, b, c := newWorkload(t, "10.67.8.1"), newWorkload(t, "10.67.8.2"), newWorkload(t, "10.67.8.3")
	grouped := func(w *testutil.Workload, n int, in model.DirectionPolicy) *model.Endpoint {
		ep := endpointFor(w, n, in.WithDigest(), allowAll().WithDigest())
		ep.PolicyGroup = "g"
		return ep
	}
	epA := allowAllEndpoint(a, 0)
	epB, epC := grouped(b, 1, allowAll()), grouped(c, 2, allowAll())
	mustApply(t, k, epA, epB, epC)
	testutil.WaitFor(t, 5*time.Second, "a pings b and c", func() bool { return pingsQuick(a, b.IP) && pingsQuick(a, c.IP) })
	db, _ := k.Endpoint(b.HostIface)
	if dc, _ := k.Endpoint(c.HostIface); dc.Slot != db.Slot {
		t.Fatalf("b in slot %d, c in slot %d: one group, want one slot", db.Slot, dc.Slot)
	}

	before := k.Ops()
	mustApply(t, k, grouped(b, 1, denyAll()))
	if d := k.Ops().Sub(before); d.JumpWrites != 1 || d.ProgramLoads != 1 || d.Writes() != 2 {
		t.Fatalf("b's policy change: %+v, want one load and one jump write", d)
	}
	if pingsQuick(a, c.IP) {
		t.Fatal("a still pings c after its group's ingress became deny")
	}
	before = k.Ops()
	mustApply(t, k, grouped(c, 2, denyAll()))
	if d := k.Ops().Sub(before); d.Writes() != 0 {
		t.Fatalf("c's apply of what its group's slot has: %+v, want no write", d)
	}

	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	k2 := openKernel(t, pin)
	before = k2.Ops()
	mustApply(t, k2, epA, grouped(b, 1, denyAll()), grouped(c, 2, denyAll()))
	if d := k2.Ops().Sub(before); d.Writes() != 0 {
		t.Fatalf("re-applying the group after a restart: %+v, want no write", d)
	}
	before = k2.Ops()
	mustApply(t, k2, grouped(b, 1, allowAll()))
	if d := k2.Ops().Sub(before); d.JumpWrites != 1 || d.IfStateWrites != 0 {
		t.Fatalf("policy change of the adopted group: %+v, want one jump write", d)
	}
	testutil.WaitFor(t, 5*time.Second, "a pings c again", func() bool { return pingsQuick(a, c.IP) })
}
