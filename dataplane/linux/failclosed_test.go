package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/internal/testutil"
)

// waitClosed waits until w's interface has a dpd_ifstate entry without
// READY: the entry programs drop everything.
func waitClosed(t *testing.T, k *Kernel, w *testutil.Workload) int {
	t.Helper()
	ifindex := ifindexOf(t, w.HostIface)
	testutil.WaitFor(t, 5*time.Second, w.HostIface+" fails closed", func() bool {
		ok, ready := ifState(t, k, ifindex)
		return ok && !ready && entryProgs(t, ifindex) == 2
	})
	return ifindex
}

// TestFailClosed: a workload interface the controller has not described
// passes nothing, even wired like a CNI would wire it, while the same wiring
// on an interface dpd does not watch passes; it passes once programmed. An
// endpoint whose programming fails keeps dropping, and an interface that
// goes away leaves nothing behind.
func TestFailClosed(t *testing.T) {
	k := openKernel(t, newPinDir(t))
	watch(t, k)
	peer := newWorkload(t, "10.77.4.1")
	mustApply(t, k, allowAllEndpoint(peer, 1))

	control := testutil.NewWorkload(t, fmt.Sprintf("fx%d", os.Getpid()%100000), "10.77.4.9")
	wireLikeCNI(t, control)
	testutil.WaitFor(t, 5*time.Second, "the unwatched control reaches the peer", func() bool { return pingsQuick(control, peer.IP) })

	// Appears before its endpoint message: drops until programmed.
	w := newWorkload(t, "10.77.4.2")
	wireLikeCNI(t, w)
	waitClosed(t, k, w)
	if pingsQuick(w, peer.IP) || pingsQuick(peer, w.IP) {
		t.Fatal("an interface with no endpoint passed traffic")
	}
	mustApply(t, k, allowAllEndpoint(w, 2))
	testutil.WaitFor(t, 5*time.Second, "w passes once programmed", func() bool { return pingsQuick(w, peer.IP) })
	if !pingsQuick(peer, w.IP) {
		t.Error("peer cannot reach w once programmed")
	}

	// Programming fails (an IP set the kernel does not know): still closed.
	bad := newWorkload(t, "10.77.4.3")
	wireLikeCNI(t, bad)
	badIfindex := waitClosed(t, k, bad)
	pol := model.DirectionPolicy{Profiles: []model.PolicyRules{{Name: "p", Kind: "profile",
		Rules: []model.Rule{{Action: model.ActionAllow, SrcIPSets: []string{"no-such-set"}}}}}}
	if err := k.ApplyEndpoint(endpointFor(bad, 3, pol, allowAll())); err == nil {
		t.Fatal("applying a policy with an unknown IP set succeeded")
	}
	if ok, ready := ifState(t, k, badIfindex); !ok || ready {
		t.Fatalf("after a failed apply: ifstate present %v ready %v; want present, not ready", ok, ready)
	}
	if pingsQuick(bad, peer.IP) {
		t.Fatal("an interface whose programming failed passed traffic")
	}
	if k.Ops().FailClosed < 2 {
		t.Errorf("fail-closed count %d, want >= 2", k.Ops().FailClosed)
	}

	// The unprogrammed interface goes: its state goes with it.
	testutil.Run(t, "ip", "link", "del", bad.HostIface)
	// The failed endpoint still names it; the engine removes it when the
	// controller does. An interface nobody names is forgotten at once.
	mustNil(t, k.RemoveEndpoint(endpointFor(bad, 3, pol, allowAll())))
	lone := newWorkload(t, "10.77.4.4")
	loneIfindex := waitClosed(t, k, lone)
	testutil.Run(t, "ip", "link", "del", lone.HostIface)
	testutil.WaitFor(t, 5*time.Second, "the vanished interface's state is forgotten", func() bool {
		ok, _ := ifState(t, k, loneIfindex)
		pins, _ := filepath.Glob(filepath.Join(k.BPF().PinDir(), "links", lone.HostIface+"_*"))
		_, tracked := k.Endpoint(lone.HostIface)
		return !ok && len(pins) == 0 && !tracked
	})
	if ok, _ := ifState(t, k, badIfindex); ok {
		t.Error("ifstate of the removed endpoint's vanished interface left")
	}
}
