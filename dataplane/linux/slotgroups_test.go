package linux

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// groupFleet is n programmed endpoints cali0..cali<n-1> of policy group
// "g" with ingress policy in, on the fake kernel, after the first apply.
func groupFleet(t *testing.T, f *fakeKernel, k *Kernel, n int, in string) []*model.Endpoint {
	t.Helper()
	eps := make([]*model.Endpoint, n)
	for i := range eps {
		name := fmt.Sprintf("cali%d", i)
		f.addLink(name)
		k.onLink(linkUp(name))
		eps[i] = groupEndpoint(f, name, i, in, "g")
	}
	k.drainAttaches()
	for _, ep := range eps {
		if err := k.ApplyEndpoint(ep); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	return eps
}

func groupEndpoint(f *fakeKernel, iface string, n int, in, group string) *model.Endpoint {
	ep := f.endpoint(iface, n, in, "allow-all")
	ep.PolicyGroup = group
	return ep
}

// withIngress is ep with ingress policy in.
func withIngress(f *fakeKernel, ep *model.Endpoint, in string) *model.Endpoint {
	c := *ep
	c.Ingress = f.policy(in)
	return &c
}

// countLinks counts the interfaces whose dump line contains want.
func countLinks(f *fakeKernel, want string) int {
	n := 0
	for _, l := range strings.Split(f.dump(), "\n") {
		if strings.HasPrefix(l, "link ") && strings.Contains(l, want) {
			n++
		}
	}
	return n
}

// A policy change of a group of 1,000 trusted endpoints: one program
// load and one jump write in all, made by the first endpoint's apply,
// from which on every member enforces the new policy; no netlink call
// (configuring an interface fails the test), no ifstate write.
func TestPolicyGroupChangeWritesOneSlot(t *testing.T) {
	const n = 1000
	f := newFakeKernel(t)
	k := f.kernel()
	eps := groupFleet(t, f, k, n, "allow-web")
	if got := countLinks(f, "ready egress:allow-all ingress:allow-web"); got != n {
		t.Fatalf("%d of %d endpoints enforce their policy after the first apply:\n%s", got, n, f.dump())
	}
	if k.eps.slots.n != 1 {
		t.Fatalf("%d slots in use for one policy group, want 1", k.eps.slots.n)
	}
	for _, op := range []string{"ConfigureEndpoint", "ConfigureNewEndpoint", "UnconfigureEndpoint", "SetIfState", "Attach", "IfStates", "Policies"} {
		f.fail[op] = errors.New(op + " on a policy-only change")
	}
	f.take()
	before := k.Ops()
	next := make([]*model.Endpoint, n)
	for i, ep := range eps {
		next[i] = withIngress(f, ep, "allow-db")
	}
	k.PreloadPolicies(next)
	if err := k.ApplyEndpoint(next[0]); err != nil {
		t.Fatal(err)
	}
	if got := countLinks(f, "ready egress:allow-all ingress:allow-db"); got != n {
		t.Fatalf("after the first member's apply %d of %d endpoints enforce the new policy, want all", got, n)
	}
	for _, ep := range next[1:] {
		if err := k.ApplyEndpoint(ep); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	d := k.Ops().Sub(before)
	if d.ProgramLoads != 1 || d.JumpWrites != 1 || d.Writes() != 2 {
		t.Fatalf("policy change of %d grouped endpoints: %+v, want one load and one jump write", n, d)
	}
	if f.count("Load") != 1 || f.count("InstallPolicy") != 1 || f.count("ClearPolicy") != 0 {
		t.Fatalf("kernel operations: %q, want one load and one install (and the old program's release)", f.take())
	}
	if st, _ := k.Endpoint("cali999"); !strings.Contains(st.IngressProgram, "ingress") || k.ProgramCount() != 2 {
		t.Fatalf("Inspect: %+v, %d programs loaded; want the new ingress program and the shared egress one only", st, k.ProgramCount())
	}
}

// Leaving and joining groups: an endpoint whose references change moves
// to its new group's slot with one ifstate write and never changes what
// the rest of its old group enforces; the last member to go clears and
// frees the group's slot.
func TestPolicyGroupMembership(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	eps := groupFleet(t, f, k, 4, "allow-web")

	f.take()
	moved := groupEndpoint(f, "cali1", 1, "allow-db", "h")
	if err := k.ApplyEndpoint(moved); err != nil {
		t.Fatal(err)
	}
	if got := countLinks(f, "ingress:allow-web"); got != 3 {
		t.Fatalf("the rest of group g: %d enforce allow-web, want 3:\n%s", got, f.dump())
	}
	if !strings.Contains(f.dump(), "link cali1 attached=tcx ready egress:allow-all ingress:allow-db") {
		t.Fatalf("cali1 does not enforce its new group's policy:\n%s", f.dump())
	}
	if ifs := f.count("SetIfState"); ifs != 1 || k.eps.slots.n != 2 {
		t.Fatalf("move to another group: %d ifstate writes, %d slots; want 1 and 2 (%q)", ifs, k.eps.slots.n, f.take())
	}

	// No group (a slot of its own), then back into g.
	own := groupEndpoint(f, "cali1", 1, "allow-web", "")
	if err := k.ApplyEndpoint(own); err != nil {
		t.Fatal(err)
	}
	if k.eps.slots.n != 2 || k.eps.groups["h"] != nil {
		t.Fatalf("after leaving h: %d slots, group h %v; want g's and cali1's own, h freed", k.eps.slots.n, k.eps.groups["h"])
	}
	if err := k.ApplyEndpoint(eps[1]); err != nil {
		t.Fatal(err)
	}
	if k.eps.slots.n != 1 || k.eps.groups["g"].users != 4 {
		t.Fatalf("back in g: %d slots, %d members; want 1 and 4", k.eps.slots.n, k.eps.groups["g"].users)
	}
	if strings.Contains(f.dump(), "no ready interface") {
		t.Fatalf("a slot no interface names kept its programs:\n%s", f.dump())
	}

	for _, ep := range eps {
		if err := k.RemoveEndpoint(ep); err != nil {
			t.Fatal(err)
		}
	}
	if k.eps.slots.n != 0 || len(k.eps.groups) != 0 || len(f.jump) != 0 || k.ProgramCount() != 0 {
		t.Fatalf("after removing every member: %d slots, %d groups, jump %v, %d programs; want none", k.eps.slots.n, len(k.eps.groups), f.jump, k.ProgramCount())
	}
}

// A restarted dpd adopts a group's shared slot: the same endpoints again
// write nothing, and a policy change is again one jump write. A member
// whose group's policy changed while dpd was down does not change what
// the other interfaces adopted in that slot enforce: it moves out.
func TestPolicyGroupAdoptedAfterRestart(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	eps := groupFleet(t, f, k, 3, "allow-web")
	k.eps.pols.abandon()

	k = f.kernel()
	f.take()
	before := k.Ops()
	for _, ep := range eps {
		if err := k.ApplyEndpoint(ep); err != nil {
			t.Fatal(err)
		}
	}
	if d := k.Ops().Sub(before); d.Writes() != 0 {
		t.Fatalf("re-applying the adopted group: %+v (%q), want no write", d, f.take())
	}
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	before = k.Ops()
	for _, ep := range eps {
		if err := k.ApplyEndpoint(withIngress(f, ep, "allow-db")); err != nil {
			t.Fatal(err)
		}
	}
	if d := k.Ops().Sub(before); d.JumpWrites != 1 || d.ProgramLoads != 1 {
		t.Fatalf("policy change of the adopted group: %+v, want one load and one jump write", d)
	}

	// Restart again; this time the controller's policy for the group
	// changed meanwhile, and cali0 comes first.
	k.eps.pols.abandon()
	k = f.kernel()
	if err := k.ApplyEndpoint(groupEndpoint(f, "cali0", 0, "allow-ssh", "g")); err != nil {
		t.Fatal(err)
	}
	if got := countLinks(f, "ingress:allow-db"); got != 2 {
		t.Fatalf("cali0's apply changed what the other adopted members enforce:\n%s", f.dump())
	}
	for i, name := range []string{"cali1", "cali2"} {
		if err := k.ApplyEndpoint(groupEndpoint(f, name, i+1, "allow-ssh", "g")); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.EndApply(); err != nil {
		t.Fatal(err)
	}
	if got := countLinks(f, "ingress:allow-ssh"); got != 3 || k.eps.slots.n != 1 {
		t.Fatalf("after the first apply: %d enforce allow-ssh, %d slots; want 3 and 1:\n%s", got, k.eps.slots.n, f.dump())
	}
	if strings.Contains(f.dump(), "no ready interface") {
		t.Fatalf("the adopted slot kept its programs:\n%s", f.dump())
	}
}

// As many endpoints as there are slots leave their group one by one for
// slots of their own and come back: the last member to leave keeps the
// group's slot, the first back turns its own slot into the group's, so
// no move needs a slot more than the endpoints hold.
func TestPolicyGroupMovesAtFullCapacity(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	n := len(k.eps.slots.used)
	eps := groupFleet(t, f, k, n, "allow-web")
	for i, ep := range eps {
		if err := k.ApplyEndpoint(groupEndpoint(f, ep.Iface, i, "allow-web", "")); err != nil {
			t.Fatalf("%s to a slot of its own: %v", ep.Iface, err)
		}
	}
	if k.eps.slots.n != n || len(k.eps.groups) != 0 {
		t.Fatalf("every endpoint on its own: %d slots, %d groups; want %d and none", k.eps.slots.n, len(k.eps.groups), n)
	}
	for _, ep := range eps {
		if err := k.ApplyEndpoint(ep); err != nil {
			t.Fatalf("%s back into its group: %v", ep.Iface, err)
		}
	}
	if got := countLinks(f, "ingress:allow-web"); got != n || k.eps.slots.n != 1 || strings.Contains(f.dump(), "no ready interface") {
		t.Fatalf("back in one group: %d enforce their policy, %d slots; want %d and 1:\n%s", got, k.eps.slots.n, n, f.dump())
	}
}
