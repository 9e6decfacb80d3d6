package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/client"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/internal/testutil"
	"github.com/dpd-dev/dpd/proto/felix"
)

// This file holds what the survival tests add to the harness: a node whose
// successive dpd processes share one socket and one pin directory (as a
// real node's restarts do), a controller that outlives them, and
// fingerprints of the kernel state. survival_traffic_test.go has the
// traffic that measures its own losses.

var nodeSeq atomic.Uint32

// node is a socket, a pin directory and a log directory shared by the dpd
// processes started on it one after the other.
type node struct {
	t      *testing.T
	dir    string
	socket string
	pin    string
	cur    *Daemon
	starts int
}

func newNode(t *testing.T) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{
		t:      t,
		dir:    dir,
		socket: filepath.Join(dir, "dpd.sock"),
		pin:    fmt.Sprintf("/sys/fs/bpf/dpd-e2e-surv-%d-%d", os.Getpid(), nodeSeq.Add(1)),
	}
	// Registered first, so it runs last: after every dpd of the node has
	// been stopped by its own cleanup.
	t.Cleanup(func() {
		if err := os.RemoveAll(n.pin); err != nil {
			t.Errorf("remove pin dir %s: %v", n.pin, err)
		}
	})
	return n
}

// start runs a new dpd on the node with env added to the environment and
// waits until it serves gRPC. The previous one must have exited.
func (n *node) start(env ...string) *Daemon {
	n.t.Helper()
	return n.startWrapped(nil, env...)
}

// startWrapped is start with dpd run by the command wrap (wrap's argv, then
// dpd's), such as unshare.
func (n *node) startWrapped(wrap []string, env ...string) *Daemon {
	t := n.t
	t.Helper()
	n.starts++
	cfg := daemonConfig(t, n.pin)
	cfg.Socket = n.socket
	cfg.LogPath = filepath.Join(n.dir, fmt.Sprintf("dpd-%d.log", n.starts))
	cfg.Env = env
	cfg.Wrap = wrap
	n.cur = launchDaemon(t, cfg, false)
	return n.cur
}

// kill9 kills the running dpd with SIGKILL: no cleanup of any kind.
func (n *node) kill9() {
	n.t.Helper()
	n.cur.Kill(n.t)
	n.cur = nil
}

// stop stops the running dpd with SIGTERM, as an upgrade would.
func (n *node) stop() {
	n.t.Helper()
	n.cur.Stop(n.t)
	n.cur = nil
}

// waitExit waits for the running dpd to exit on its own with code.
func (n *node) waitExit(code int, timeout time.Duration) {
	t := n.t
	t.Helper()
	got, err := n.cur.WaitExit(timeout)
	n.cur = nil
	if err != nil {
		t.Fatal(err)
	}
	if got != code {
		t.Fatalf("dpd exited with code %d, want %d", got, code)
	}
}

// firstApply returns the key=value fields of the kernel's "first apply
// after InSync done" log line of the running (or last) dpd.
func (n *node) firstApply(d *Daemon) (map[string]string, bool) {
	for _, line := range strings.Split(d.Log(), "\n") {
		if !strings.Contains(line, `msg="first apply after InSync done"`) {
			continue
		}
		fields := map[string]string{}
		for _, m := range regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`).FindAllStringSubmatch(line, -1) {
			fields[m[1]] = strings.Trim(m[2], `"`)
		}
		return fields, true
	}
	return nil, false
}

// controller is a controller session that outlives dpd restarts: its client
// dials the node's socket, and the client library's session reconnects and
// replays the snapshot to whichever dpd listens there.
type controller struct {
	*Controller
	client *client.Client
}

func (n *node) connect(snapshot []*felix.ToDataplane) *controller {
	t := n.t
	t.Helper()
	cl, err := client.Dial(context.Background(), "unix://"+n.socket, client.WithLazy())
	if err != nil {
		t.Fatalf("dial dpd: %v", err)
	}
	c := &Controller{status: map[string]endpointStatus{}, changed: make(chan struct{})}
	c.sess = client.NewSession(cl, func() []*felix.ToDataplane { return snapshot },
		client.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	done := make(chan struct{})
	go c.recvLoop(done)
	ctl := &controller{Controller: c, client: cl}
	t.Cleanup(func() {
		_ = c.sess.Close()
		<-done
		_ = cl.Close()
	})
	return ctl
}

// connectUp connects a controller sending snapshot and waits until its
// first stream is in sync and every workload of ws is reported up.
func (n *node) connectUp(t *testing.T, snapshot []*felix.ToDataplane, ws ...*Workload) *controller {
	t.Helper()
	ctl := n.connect(snapshot)
	ctl.waitStreams(t, 1)
	ids := make([]*felix.WorkloadEndpointID, len(ws))
	for i, w := range ws {
		ids[i] = w.ID()
	}
	ctl.WaitStatus(t, "up", ids...)
	return ctl
}

// close ends the controller: it goes away for good.
func (c *controller) close() {
	_ = c.sess.Close()
}

// waitStreams waits until n streams have reached DataplaneInSync (one per
// dpd process or per reconnect).
func (c *controller) waitStreams(t *testing.T, n int) {
	t.Helper()
	c.mustAwait(t, fmt.Sprintf("DataplaneInSync on stream %d", n), func() bool { return c.inSyncCount >= n })
}

// fingerprint describes what is installed for the workloads: the programs
// on their TCX hooks, the policy programs in dpd_jump and the dpd_ifstate
// values, by key. Equal fingerprints before and after an event mean
// nothing was reattached, reloaded, swapped or rewritten.
func fingerprint(t *testing.T, pin string, ws ...*Workload) map[string]string {
	t.Helper()
	fp := map[string]string{}
	for _, w := range ws {
		progs, err := TCXProgs(w.Ifindex)
		if err != nil {
			t.Fatalf("tcx programs of %s: %v", w.HostIface, err)
		}
		fp["tcx "+w.Pod] = fmt.Sprint(progs)
	}
	for _, name := range []string{"dpd_jump", "dpd_ifstate"} {
		m, err := mapKeys(pin, name)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			fp[name+" "+k] = v
		}
	}
	return fp
}

// diffFingerprints lists keys of after whose value differs from before;
// with all, also keys of before that after lacks.
func diffFingerprints(before, after map[string]string, all bool) []string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, fmt.Sprintf("%s: %q -> %q", k, before[k], v))
		}
	}
	if all {
		for k, v := range before {
			if _, ok := after[k]; !ok {
				out = append(out, fmt.Sprintf("%s: %q -> gone", k, v))
			}
		}
	}
	sort.Strings(out)
	return out
}

// mapKeys returns a pinned map's keys and values as hex, sorted by key.
func mapKeys(pin, name string) (map[string]string, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pin, name), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer func() { _ = m.Close() }()
	out := map[string]string{}
	k := make([]byte, m.KeySize())
	next := make([]byte, m.KeySize())
	var cur any
	for {
		if err := m.NextKey(cur, next); errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("iterate %s: %w", name, err)
		}
		copy(k, next)
		cur = k
		switch m.Type() {
		case ebpf.PerCPUHash, ebpf.PerCPUArray:
			out[fmt.Sprintf("%x", k)] = "" // counters: only the keys matter
		default:
			v := make([]byte, m.ValueSize())
			if err := m.Lookup(k, v); err == nil {
				out[fmt.Sprintf("%x", k)] = fmt.Sprintf("%x", v)
			}
		}
	}
}

// settledFingerprint is fingerprint once dpd has finished reloading its
// policy programs with the direct epilogue call (when it chose that call:
// epilogue/choice holds 1), a change in the background that is not the
// restart's. Only right after a fresh start: programs an earlier dpd
// pinned before their reload are adopted as they are and stay indirect.
func settledFingerprint(t *testing.T, pin string, ws ...*Workload) map[string]string {
	t.Helper()
	var direct uint32
	choice, err := ebpf.LoadPinnedMap(filepath.Join(pin, "epilogue", "choice"), &ebpf.LoadPinOptions{ReadOnly: true})
	switch {
	case errors.Is(err, os.ErrNotExist):
		// No pinned choice (a failed probe): dpd calls it indirectly.
	case err != nil:
		t.Fatalf("open the epilogue choice: %v", err)
	default:
		err = choice.Lookup(uint32(0), &direct)
		_ = choice.Close()
		if err != nil {
			t.Fatalf("read the epilogue choice: %v", err)
		}
	}
	if direct == 1 {
		var pending []string
		testutil.WaitFor(t, cleanupTimeout, "dpd to reload its policy programs with the direct epilogue call", func() bool {
			pending, err = indirectPolicies(pin)
			if err != nil {
				t.Fatal(err)
			}
			return len(pending) == 0
		})
	}
	return fingerprint(t, pin, ws...)
}

// indirectPolicies lists the dpd_jump policy entries whose program (a
// policy program: dpd_pol…) still tail-calls the epilogue through
// dpd_jump.
func indirectPolicies(pin string) ([]string, error) {
	jump, err := ebpf.LoadPinnedMap(filepath.Join(pin, "dpd_jump"), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open dpd_jump: %w", err)
	}
	defer func() { _ = jump.Close() }()
	info, err := jump.Info()
	if err != nil {
		return nil, err
	}
	jumpID, _ := info.ID()
	var out []string
	var key, id uint32
	it := jump.Iterate()
	for it.Next(&key, &id) {
		if key < abi.JumpPolBase {
			continue
		}
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
		if err != nil {
			continue // replaced meanwhile
		}
		pi, err := p.Info()
		_ = p.Close()
		if err != nil || !strings.HasPrefix(pi.Name, "dpd_pol") {
			continue
		}
		ids, _ := pi.MapIDs()
		if slices.Contains(ids, jumpID) {
			out = append(out, fmt.Sprintf("dpd_jump[%d]", key))
		}
	}
	return out, it.Err()
}
