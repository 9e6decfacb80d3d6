package linux

import (
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// fakeKernel is an in-memory kernel behind every facility the programmers
// use. It records each operation (ops, count) and prints its whole state
// (dump) so tests compare text, and it fails any operation on request
// (failOn), which is how tests prove that an error never turns into a
// detach, a removal or a fail-open.
type fakeKernel struct {
	t *testing.T

	nextIfindex int
	links       map[string]int // name -> ifindex
	prefix      string         // the workload interface prefix

	attached map[int]tcbpf.AttachMode // entry programs on ifindex (ours)
	foreign  map[int]bool             // another dpd's entry programs on ifindex
	linkPins map[string]bool          // TCX link pins by interface name
	ifstate  map[int]tcbpf.IfStateEntry
	jump     map[[2]uint32]ebpf.ProgramID // (slot, dir) -> program
	nets     map[string][]netip.Prefix    // routes and neighbours per interface name

	nextProg ebpf.ProgramID
	progs    map[ebpf.ProgramID]*fakeProg // every program alive in the kernel
	pins     map[string]ebpf.ProgramID    // program pin dirs (under progsDir) -> head
	names    map[[32]byte]string          // policy digests the tests named
	chain    map[uint32]bool              // dpd_chain entries
	counters map[uint64]bool              // rule counter ids
	ipsets   map[string]bool

	bpfRoutes map[netip.Prefix]tcbpf.RouteInfo
	kroutes   map[netip.Prefix]nl.RemoteRoute
	masq      string
	natFE     map[tcbpf.NATFrontend]uint32
	natBE     map[uint32][]tcbpf.NATBackend

	// loadMu serialises what preloading workers reach concurrently (Load,
	// and the recording of a program under the kernel's lock).
	loadMu sync.Mutex
	// loadHook, when set, runs at the start of every Load (without
	// loadMu).
	loadHook func(pol *model.DirectionPolicy)
	// direct: the datapath calls the epilogue directly (LoadDirect works);
	// loadDirectHook, when set, runs at the start of every LoadDirect.
	direct         bool
	loadDirectHook func()
	// mu guards what attaches reach without the kernel's lock (links,
	// attached, foreign, linkPins, ops, fail, attachHook).
	mu sync.Mutex

	ops  []string         // every write, in order
	fail map[string]error // operation name -> the error it returns
	// attachHook, when set, runs at the start of every Attach, before it
	// touches anything: tests block an attach there.
	attachHook func(ifname string)
	// hostProgs: the entry programs on ifindex are the host endpoint ones
	// (fakekernel_host_test.go); guarded by mu.
	hostProgs map[int]bool
	hepStages map[int]tcbpf.HepStages
	toHost    [2]uint32 // dpd_hep_cfg: action, 1 + slot
}

const fakeProgsDir = "/fake/progs"

func newFakeKernel(t *testing.T) *fakeKernel {
	return &fakeKernel{
		t: t, nextIfindex: 10, links: map[string]int{}, prefix: "cali",
		attached: map[int]tcbpf.AttachMode{}, foreign: map[int]bool{}, linkPins: map[string]bool{},
		ifstate: map[int]tcbpf.IfStateEntry{}, jump: map[[2]uint32]ebpf.ProgramID{}, nets: map[string][]netip.Prefix{},
		nextProg: 100, progs: map[ebpf.ProgramID]*fakeProg{}, pins: map[string]ebpf.ProgramID{},
		names: map[[32]byte]string{}, chain: map[uint32]bool{}, counters: map[uint64]bool{}, ipsets: map[string]bool{},
		bpfRoutes: map[netip.Prefix]tcbpf.RouteInfo{}, kroutes: map[netip.Prefix]nl.RemoteRoute{},
		natFE: map[tcbpf.NATFrontend]uint32{}, natBE: map[uint32][]tcbpf.NATBackend{},
		fail: map[string]error{},
	}
}

// kernel composes a Kernel over f, as New does over the real kernel.
func (f *fakeKernel) kernel() *Kernel {
	f.t.Helper()
	k := newKernel(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Hostname: "node1", GCInterval: DefaultGCInterval},
		netFacilities{links: f, endpoint: f, routes: fakeRouteNet{f}, tunnel: f, masq: f})
	if err := k.attachBPFLocked(bpfFacilities{entry: f, programs: f, sweep: f, ipsets: f, routes: f, nat: f}, 64); err != nil {
		f.t.Fatalf("attach fake bpf: %v", err)
	}
	return k
}

// policy is a direction policy the fake knows by name.
func (f *fakeKernel) policy(name string) model.DirectionPolicy {
	d := sha256.Sum256([]byte(name))
	f.names[d] = name
	return model.DirectionPolicy{Digest: d}
}

// endpoint is a workload on iface with address 10.0.0.n and the named
// ingress and egress policies.
func (f *fakeKernel) endpoint(iface string, n int, in, out string) *model.Endpoint {
	return &model.Endpoint{
		ID: model.WorkloadID{Workload: iface}, Iface: iface,
		MAC:      net.HardwareAddr{0xee, 0xee, 0, 0, 0, byte(n)},
		IPv4Nets: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(n)}), 32)},
		Ingress:  f.policy(in), Egress: f.policy(out),
	}
}

// addLink creates an interface; a re-created one gets a new ifindex.
func (f *fakeKernel) addLink(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextIfindex++
	f.links[name] = f.nextIfindex
	return f.nextIfindex
}

// delLink deletes an interface: what was attached and routed goes with it.
func (f *fakeKernel) delLink(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	idx := f.links[name]
	delete(f.links, name)
	delete(f.attached, idx)
	delete(f.foreign, idx)
	delete(f.nets, name)
}

func (f *fakeKernel) op(name string, format string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opLocked(name, format, args...)
}

func (f *fakeKernel) opLocked(name string, format string, args ...any) error {
	if err := f.fail[name]; err != nil {
		return err
	}
	f.ops = append(f.ops, name+" "+fmt.Sprintf(format, args...))
	return nil
}

// read is an operation that changes nothing: counted only when it fails.
func (f *fakeKernel) read(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail[name]
}

// take returns the operations since the last take, and forgets them.
func (f *fakeKernel) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

// count reports how many operations since the last take start with name.
func (f *fakeKernel) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, o := range f.ops {
		if strings.HasPrefix(o, name+" ") {
			n++
		}
	}
	return n
}

func (f *fakeKernel) nameOf(ifindex int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nameOfLocked(ifindex)
}

func (f *fakeKernel) nameOfLocked(ifindex int) string {
	for n, i := range f.links {
		if i == ifindex {
			return n
		}
	}
	return fmt.Sprintf("#%d", ifindex)
}

func (f *fakeKernel) progName(id ebpf.ProgramID) string {
	if p := f.progs[id]; p != nil {
		return p.name
	}
	return fmt.Sprintf("prog#%d(gone)", id)
}

// dump prints the whole fake kernel, one sorted line per object. Slots are
// shown through the interfaces whose dpd_ifstate names them, so the text
// does not depend on the order in which slots were handed out.
func (f *fakeKernel) dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var lines []string
	slotOwner := map[uint32]string{}
	for idx, e := range f.ifstate {
		if e.Flags&abi.IfReady != 0 {
			slotOwner[e.Slot] = f.nameOfLocked(idx)
		}
	}
	for name, idx := range f.links {
		l := "link " + name
		if m, ok := f.attached[idx]; ok {
			l += " attached=" + string(m)
		}
		if f.foreign[idx] {
			l += " foreign"
		}
		if e, ok := f.ifstate[idx]; ok {
			if e.Flags&abi.IfReady != 0 {
				l += " ready"
				for dir := range 2 {
					if id, ok := f.jump[[2]uint32{e.Slot, uint32(dir)}]; ok {
						l += " " + f.progName(id)
					}
				}
			} else {
				l += " closed"
			}
		}
		if nets := f.nets[name]; len(nets) > 0 {
			l += fmt.Sprintf(" nets=%v", nets)
		}
		lines = append(lines, l)
	}
	live := slices.Collect(maps.Values(f.links))
	for idx, e := range f.ifstate {
		if !slices.Contains(live, idx) {
			lines = append(lines, fmt.Sprintf("ifstate #%d slot=%d flags=%#x (no interface)", idx, e.Slot, e.Flags))
		}
	}
	for k, id := range f.jump {
		if slotOwner[k[0]] == "" {
			lines = append(lines, fmt.Sprintf("jump slot=%d dir=%d %s (no ready interface)", k[0], k[1], f.progName(id)))
		}
	}
	for n := range f.linkPins {
		lines = append(lines, "linkpin "+n)
	}
	for _, p := range f.progs {
		l := "prog " + p.name
		if p.pin != "" {
			l += " pinned"
		}
		if p.direct {
			l += " direct"
		}
		lines = append(lines, l)
	}
	for d, id := range f.pins {
		if p := f.progs[id]; p == nil || p.pin != d {
			lines = append(lines, "pindir "+shortPin(path.Base(d))+" (no program)")
		}
	}
	for i := range f.chain {
		lines = append(lines, fmt.Sprintf("chain %d", i))
	}
	for c := range f.counters {
		lines = append(lines, fmt.Sprintf("counter %d", c))
	}
	for s := range f.ipsets {
		lines = append(lines, "ipset "+s)
	}
	for dst, ri := range f.bpfRoutes {
		lines = append(lines, fmt.Sprintf("bpfroute %s flags=%#x pool=%d", dst, ri.Flags, ri.PoolType))
	}
	for dst, r := range f.kroutes {
		l := "kroute " + dst.String()
		if r.Gateway.IsValid() {
			l += " via " + r.Gateway.String()
		}
		if r.Ifindex != 0 {
			l += fmt.Sprintf(" dev #%d", r.Ifindex)
		}
		lines = append(lines, l)
	}
	if f.masq != "" && f.masq != "[] []" {
		lines = append(lines, "masquerade "+f.masq)
	}
	for fe, id := range f.natFE {
		lines = append(lines, fmt.Sprintf("natfe %s -> %d", fe, id))
	}
	for id, bes := range f.natBE {
		lines = append(lines, fmt.Sprintf("natbe %d %v", id, bes))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

var (
	_ linkFacility    = (*fakeKernel)(nil)
	_ entryFacility   = (*fakeKernel)(nil)
	_ endpointNet     = (*fakeKernel)(nil)
	_ programFacility = (*fakeKernel)(nil)
	_ sweepFacility   = (*fakeKernel)(nil)
	_ ipsetMaps       = (*fakeKernel)(nil)
	_ routeMaps       = (*fakeKernel)(nil)
	_ routeNet        = fakeRouteNet{}
	_ tunnelNet       = (*fakeKernel)(nil)
	_ masqNet         = (*fakeKernel)(nil)
	_ natMaps         = (*fakeKernel)(nil)
	_ loadedProgram   = (*fakeProg)(nil)
	_ pinnedProgram   = (*fakeProg)(nil)
)

// shortPin cuts a program pin name's hash for reading.
func shortPin(name string) string {
	if d, h, ok := strings.Cut(name, "-"); ok && len(h) > 8 {
		return d + "-" + h[:8]
	}
	return name
}
