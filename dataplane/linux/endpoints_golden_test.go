package linux

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// transcript records, step by step, the kernel operations each step made
// and the whole fake kernel's state after it, for comparison with a
// golden text.
type transcript struct {
	f *fakeKernel
	b strings.Builder
}

func (tr *transcript) step(t *testing.T, name string, do func() error) {
	t.Helper()
	tr.f.take()
	err := do()
	fmt.Fprintf(&tr.b, "== %s\n", name)
	if err != nil {
		fmt.Fprintf(&tr.b, "error: %v\n", err)
	}
	for _, o := range tr.f.take() {
		fmt.Fprintf(&tr.b, "  %s\n", o)
	}
	dump := strings.TrimSuffix(tr.f.dump(), "\n")
	if dump == "" {
		dump = "(nothing)"
	}
	for _, l := range strings.Split(dump, "\n") {
		fmt.Fprintf(&tr.b, "  | %s\n", l)
	}
}

func (tr *transcript) check(t *testing.T, want string) {
	t.Helper()
	if got := tr.b.String(); got != want {
		t.Errorf("transcript differs from the golden one:\n%s\ngot:\n%s", lineDiff(want, got), got)
	}
}

// lineDiff marks the first line where want and got part.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want %q\n  got  %q", i+1, wl, gl)
		}
	}
	return "(equal)"
}

func linkUp(name string) model.LinkUpdate { return model.LinkUpdate{Name: name, State: model.LinkUp} }

// The endpoint attach/verify state machine, step by step: what each step
// writes and the whole kernel after it. An interface seen before the first
// apply is read before it is written; one that appears later (fresh) is
// written without reading; a verified endpoint is trusted (a policy
// change writes only its jump slots) until a link event or a resync, after
// which the next apply verifies again and repairs only what drifted. The
// attach worker fails closed what the monitor reports; an apply takes a
// queued attach over. Removal never detaches: the interface fails closed
// by one ifstate write, and a later endpoint on it is map writes only; its
// programs, pins and ifstate entry go when the interface does.
func TestEndpointStateMachineGolden(t *testing.T) {
	f := newFakeKernel(t)
	k := f.kernel()
	tr := &transcript{f: f}
	ep1 := f.endpoint("cali1", 1, "allow-web", "allow-all")
	ep1b := f.endpoint("cali1", 1, "allow-db", "allow-all")
	ep2 := f.endpoint("cali2", 2, "allow-web", "allow-all")

	tr.step(t, "cali1 appears before its endpoint: the attach worker fails it closed", func() error {
		f.addLink("cali1")
		k.onLink(linkUp("cali1"))
		k.drainAttaches()
		return nil
	})
	tr.step(t, "first apply: policies, ready, then routes (read first); no attach", func() error { return k.ApplyEndpoint(ep1) })
	tr.step(t, "re-apply of the verified endpoint: nothing", func() error { return k.ApplyEndpoint(ep1) })
	tr.step(t, "policy change on a trusted interface: jump slot only", func() error { return k.ApplyEndpoint(ep1b) })
	tr.step(t, "link event, nothing drifted: re-verify writes nothing", func() error {
		k.onLink(linkUp("cali1"))
		return k.ApplyEndpoint(ep1b)
	})
	tr.step(t, "link went down and lost its routes: re-verify repairs them", func() error {
		delete(f.nets, "cali1")
		k.onLink(model.LinkUpdate{Name: "cali1", State: model.LinkDown})
		return k.ApplyEndpoint(ep1b)
	})
	tr.step(t, "resync after the entry programs were lost: re-attach", func() error {
		delete(f.attached, f.links["cali1"])
		k.Resync()
		return k.ApplyEndpoint(ep1b)
	})
	tr.step(t, "end of the first apply: collection finds nothing", k.EndApply)
	tr.step(t, "a fresh interface after the first apply: its apply takes the queued attach over, writes without reading", func() error {
		f.addLink("cali2")
		k.onLink(linkUp("cali2"))
		err := k.ApplyEndpoint(ep2)
		k.drainAttaches() // nothing left for the worker
		return err
	})
	tr.step(t, "cali1 re-created under its endpoint: programmed anew", func() error {
		f.delLink("cali1")
		k.onLink(model.LinkUpdate{Name: "cali1", State: model.LinkAbsent})
		f.addLink("cali1")
		k.onLink(linkUp("cali1"))
		return k.ApplyEndpoint(ep1b)
	})
	tr.step(t, "removal of cali2: one ifstate write fails it closed, no detach", func() error { return k.RemoveEndpoint(ep2) })
	tr.step(t, "cali2's endpoint again: map writes only", func() error { return k.ApplyEndpoint(ep2) })
	tr.step(t, "cali2 removed, then deleted: its pins and ifstate entry go with it", func() error {
		if err := k.RemoveEndpoint(ep2); err != nil {
			return err
		}
		f.delLink("cali2")
		k.onLink(model.LinkUpdate{Name: "cali2", State: model.LinkAbsent})
		return nil
	})
	tr.step(t, "collection: nothing", func() error {
		r, err := k.CollectGarbage()
		if r.Total() != 0 {
			t.Errorf("collected %+v", r)
		}
		return err
	})
	tr.check(t, goldenEndpointStateMachine)
}

const goldenEndpointStateMachine = `== cali1 appears before its endpoint: the attach worker fails it closed
  Attach cali1
  SetIfState cali1 slot=0 flags=0x2
  | link cali1 attached=tcx closed
  | linkpin cali1
== first apply: policies, ready, then routes (read first); no attach
  Load ingress:allow-web
  Pin ingress:allow-web
  InstallPolicy slot=0 dir=1 ingress:allow-web
  Load egress:allow-all
  Pin egress:allow-all
  InstallPolicy slot=0 dir=0 egress:allow-all
  SetIfState cali1 slot=0 flags=0x3
  ConfigureEndpoint cali1 [10.0.0.1/32]
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | linkpin cali1
  | prog egress:allow-all pinned
  | prog ingress:allow-web pinned
== re-apply of the verified endpoint: nothing
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.1/32]
  | linkpin cali1
  | prog egress:allow-all pinned
  | prog ingress:allow-web pinned
== policy change on a trusted interface: jump slot only
  Load ingress:allow-db
  Pin ingress:allow-db
  InstallPolicy slot=0 dir=1 ingress:allow-db
  Close ingress:allow-web
  Unpin ingress:allow-web
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | linkpin cali1
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
== link event, nothing drifted: re-verify writes nothing
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | linkpin cali1
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
== link went down and lost its routes: re-verify repairs them
  ConfigureEndpoint cali1 [10.0.0.1/32]
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | linkpin cali1
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
== resync after the entry programs were lost: re-attach
  Attach cali1
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | linkpin cali1
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
== end of the first apply: collection finds nothing
  SyncMasquerade [] []
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | linkpin cali1
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
== a fresh interface after the first apply: its apply takes the queued attach over, writes without reading
  Attach cali2
  SetIfState cali2 slot=1 flags=0x2
  Load ingress:allow-web
  Pin ingress:allow-web
  InstallPolicy slot=1 dir=1 ingress:allow-web
  InstallPolicy slot=1 dir=0 egress:allow-all
  SetIfState cali2 slot=1 flags=0x3
  ConfigureNewEndpoint cali2 [10.0.0.2/32]
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | linkpin cali1
  | linkpin cali2
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
  | prog ingress:allow-web pinned
== cali1 re-created under its endpoint: programmed anew
  DeleteIfState #11
  Attach cali1
  SetIfState cali1 slot=0 flags=0x2
  SetIfState cali1 slot=0 flags=0x3
  ConfigureEndpoint cali1 [10.0.0.1/32]
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | linkpin cali1
  | linkpin cali2
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
  | prog ingress:allow-web pinned
== removal of cali2: one ifstate write fails it closed, no detach
  SetIfState cali2 slot=0 flags=0x2
  UnconfigureEndpoint cali2 [10.0.0.2/32]
  ClearPolicy slot=1 dir=1
  Close ingress:allow-web
  Unpin ingress:allow-web
  ClearPolicy slot=1 dir=0
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | link cali2 attached=tcx closed
  | linkpin cali1
  | linkpin cali2
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
== cali2's endpoint again: map writes only
  Load ingress:allow-web
  Pin ingress:allow-web
  InstallPolicy slot=1 dir=1 ingress:allow-web
  InstallPolicy slot=1 dir=0 egress:allow-all
  SetIfState cali2 slot=1 flags=0x3
  ConfigureNewEndpoint cali2 [10.0.0.2/32]
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | link cali2 attached=tcx ready egress:allow-all ingress:allow-web nets=[10.0.0.2/32]
  | linkpin cali1
  | linkpin cali2
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
  | prog ingress:allow-web pinned
== cali2 removed, then deleted: its pins and ifstate entry go with it
  SetIfState cali2 slot=0 flags=0x2
  UnconfigureEndpoint cali2 [10.0.0.2/32]
  ClearPolicy slot=1 dir=1
  Close ingress:allow-web
  Unpin ingress:allow-web
  ClearPolicy slot=1 dir=0
  RemoveLinkPins cali2
  DeleteIfState #12
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | linkpin cali1
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
== collection: nothing
  | link cali1 attached=tcx ready egress:allow-all ingress:allow-db nets=[10.0.0.1/32]
  | linkpin cali1
  | prog egress:allow-all pinned
  | prog ingress:allow-db pinned
`

// Endpoints and their interfaces arriving in any order end in one state:
// each interface attached, ready, with its policies and routes, nothing
// else in the maps, whether the attach worker or the apply attached it;
// and removing them in any order, interleaved with their interfaces going
// away, leaves nothing.
func TestEndpointsAnyOrder(t *testing.T) {
	const n = 3
	var want, wantGone string
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 0))
		f := newFakeKernel(t)
		k := f.kernel()
		eps := make([]*model.Endpoint, n)
		var steps []func() error
		for i := range n {
			name := fmt.Sprintf("cali%d", i)
			eps[i] = f.endpoint(name, i+1, fmt.Sprintf("in-%d", i%2), "allow-all")
			steps = append(steps,
				func() error { f.addLink(name); k.onLink(linkUp(name)); return nil },
				func() error { return k.ApplyEndpoint(eps[i]) })
		}
		// The attach worker runs at any point (or never: each apply
		// attaches for itself).
		drain := func() error { k.drainAttaches(); return nil }
		steps = append(steps, k.EndApply, drain, drain)
		rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
		for _, s := range steps {
			if err := s(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		// The engine applies an endpoint again when its interface appears.
		for _, ep := range eps {
			if err := k.ApplyEndpoint(ep); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		got := f.dump()
		if want == "" {
			want = got
			t.Logf("programmed:\n%s", want)
		} else if got != want {
			t.Fatalf("seed %d ends elsewhere:\n%s\nwant:\n%s", seed, got, want)
		}

		steps = steps[:0]
		for i := range n {
			name := eps[i].Iface
			steps = append(steps,
				func() error {
					f.delLink(name)
					k.onLink(model.LinkUpdate{Name: name, State: model.LinkAbsent})
					return nil
				},
				func() error { return k.RemoveEndpoint(eps[i]) })
		}
		steps = append(steps, func() error { k.drainAttaches(); return nil })
		rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
		for _, s := range steps {
			if err := s(); err != nil {
				t.Fatalf("seed %d: removal: %v", seed, err)
			}
		}
		if _, err := k.CollectGarbage(); err != nil {
			t.Fatalf("seed %d: collect: %v", seed, err)
		}
		got = f.dump()
		if wantGone == "" {
			wantGone = got
			t.Logf("after removal:\n%s", wantGone)
		} else if got != wantGone {
			t.Fatalf("seed %d: removal ends elsewhere:\n%s\nwant:\n%s", seed, got, wantGone)
		}
	}
	if !strings.Contains(want, "link cali2 attached=tcx ready egress:allow-all ingress:in-0 nets=[10.0.0.3/32]") {
		t.Errorf("cali2 not programmed:\n%s", want)
	}
	if wantGone != "\n" {
		t.Errorf("removal left state behind:\n%s", wantGone)
	}
}
