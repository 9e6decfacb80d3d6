package linux

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
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
		pins, _ := filepath.Glob(filepath.Join(k.datapath().PinDir(), "links", lone.HostIface+"_*"))
		_, tracked := k.Endpoint(lone.HostIface)
		return !ok && len(pins) == 0 && !tracked
	})
	if ok, _ := ifState(t, k, badIfindex); ok {
		t.Error("ifstate of the removed endpoint's vanished interface left")
	}
}

// logRecords is a slog handler keeping every record, at every level.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record // guarded by mu
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}

func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// errOf returns the "err" attribute of the first record with msg.
func (l *logRecords) errOf(msg string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.Message != msg {
			continue
		}
		var err error
		r.Attrs(func(a slog.Attr) bool {
			if e, ok := a.Value.Any().(error); ok && a.Key == "err" {
				err = e
				return false
			}
			return true
		})
		return err
	}
	return nil
}

// at returns the messages logged at level or above.
func (l *logRecords) at(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if r.Level >= level {
			out = append(out, r.Message)
		}
	}
	return out
}

// TestFailCloseVanishedInterface: failing closed an interface deleted
// under us (the change event just before its deletion) is not a warning,
// on either attach path, and its absent event leaves nothing behind.
func TestFailCloseVanishedInterface(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			k := openKernelWith(t, Options{PinDir: newPinDir(t), ForceLegacyTC: legacy})
			logs := &logRecords{}
			k.log = slog.New(logs)
			k.eps.log = k.log
			w := newWorkload(t, "10.77.5.1")
			ifindex := ifindexOf(t, w.HostIface)
			testutil.Run(t, "ip", "link", "del", w.HostIface)

			k.mu.Lock()
			k.eps.queue.put(w.HostIface, ifindex)
			k.mu.Unlock()
			k.drainAttaches() // the attach worker's job, run here
			if warns := logs.at(slog.LevelWarn); len(warns) != 0 {
				t.Fatalf("warned about a vanished interface: %q", warns)
			}
			const gone = "interface went away before it could fail closed"
			if debug := logs.at(slog.LevelDebug); !slices.Contains(debug, gone) {
				t.Fatalf("no debug record of the vanished interface: %q", debug)
			}
			// Recognised by the error itself, not only by asking again.
			if err := logs.errOf(gone); !isNoDevice(err) {
				t.Errorf("attach error %v not recognised as a vanished device", err)
			} else {
				t.Logf("attach error: %v", err)
			}
			if k.Ops().FailClosed != 0 {
				t.Fatal("a vanished interface counted as failed closed")
			}

			k.onLink(model.LinkUpdate{Name: w.HostIface, State: model.LinkAbsent})
			if _, tracked := k.Endpoint(w.HostIface); tracked {
				t.Error("the vanished interface's state outlived its absent event")
			}
			if ok, _ := ifState(t, k, ifindex); ok {
				t.Error("ifstate left for the vanished interface")
			}
			pins, _ := filepath.Glob(filepath.Join(k.datapath().PinDir(), "links", w.HostIface+"_*"))
			if len(pins) != 0 {
				t.Errorf("link pins left: %v", pins)
			}
		})
	}
}
