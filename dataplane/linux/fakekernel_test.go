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
	"github.com/vishvananda/netlink"

	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/polprog"
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
	// mu guards what attaches reach without the kernel's lock (links,
	// attached, foreign, linkPins, ops, fail, attachHook).
	mu sync.Mutex

	ops  []string         // every write, in order
	fail map[string]error // operation name -> the error it returns
	// attachHook, when set, runs at the start of every Attach, before it
	// touches anything: tests block an attach there.
	attachHook func(ifname string)
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

// --- linkFacility

func (f *fakeKernel) Ifindex(name string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.links[name]
	return i, ok
}

func (f *fakeKernel) Matches(name string) bool { return strings.HasPrefix(name, f.prefix) }

func (f *fakeKernel) LinkName(ifindex int) (string, error) {
	if err := f.read("LinkName"); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for n, i := range f.links {
		if i == ifindex {
			return n, nil
		}
	}
	return "", netlink.LinkNotFoundError{}
}

func (f *fakeKernel) Links() ([]linkRef, error) {
	if err := f.read("Links"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []linkRef
	for n, i := range f.links {
		out = append(out, linkRef{Name: n, Ifindex: i})
	}
	slices.SortFunc(out, func(a, b linkRef) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// --- entryFacility

func (f *fakeKernel) Attach(ifindex int, ifname string) (tcbpf.AttachMode, error) {
	f.mu.Lock()
	hook := f.attachHook
	f.mu.Unlock()
	if hook != nil {
		hook(ifname)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.links[ifname] != ifindex {
		return "", fmt.Errorf("attach %s: %w", ifname, netlink.LinkNotFoundError{})
	}
	if err := f.opLocked("Attach", "%s", ifname); err != nil {
		return "", err
	}
	f.attached[ifindex] = tcbpf.AttachTCX
	delete(f.foreign, ifindex)
	f.linkPins[ifname] = true
	return tcbpf.AttachTCX, nil
}

func (f *fakeKernel) AttachedCurrent(ifindex int, ifname string) (tcbpf.AttachMode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.attached[ifindex]
	return m, ok && f.linkPins[ifname] && f.fail["AttachedCurrent"] == nil
}

func (f *fakeKernel) Detach(ifindex int, ifname string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.opLocked("Detach", "%s", ifname); err != nil {
		return err
	}
	delete(f.attached, ifindex)
	delete(f.linkPins, ifname)
	return nil
}

func (f *fakeKernel) RemoveLinkPins(ifname string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.opLocked("RemoveLinkPins", "%s", ifname); err != nil {
		return err
	}
	delete(f.linkPins, ifname)
	return nil
}

func (f *fakeKernel) PinnedLinks() ([]string, error) {
	if err := f.read("PinnedLinks"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.linkPins)), nil
}

func (f *fakeKernel) EntryOwners(ifindex int) (ours, foreign bool, err error) {
	if err := f.read("EntryOwners"); err != nil {
		return false, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ours = f.attached[ifindex]
	return ours, f.foreign[ifindex], nil
}

func (f *fakeKernel) OwnsAttachment(ifindex int) (bool, error) {
	ours, _, err := f.EntryOwners(ifindex)
	return ours, err
}

func (f *fakeKernel) SetIfState(ifindex int, slot, flags uint32) error {
	if err := f.op("SetIfState", "%s slot=%d flags=%#x", f.nameOf(ifindex), slot, flags); err != nil {
		return err
	}
	f.ifstate[ifindex] = tcbpf.IfStateEntry{Slot: slot, Flags: flags}
	return nil
}

func (f *fakeKernel) DeleteIfState(ifindex int) error {
	if err := f.op("DeleteIfState", "%s", f.nameOf(ifindex)); err != nil {
		return err
	}
	delete(f.ifstate, ifindex)
	return nil
}

func (f *fakeKernel) IfStates() (map[int]tcbpf.IfStateEntry, error) {
	if err := f.read("IfStates"); err != nil {
		return nil, err
	}
	return maps.Clone(f.ifstate), nil
}

func (f *fakeKernel) InstallPolicy(slot uint32, dir int, p loadedProgram) error {
	fp := p.(*fakeProg)
	if err := f.op("InstallPolicy", "slot=%d dir=%d %s", slot, dir, fp.name); err != nil {
		return err
	}
	k := [2]uint32{slot, uint32(dir)}
	prev, had := f.jump[k]
	f.jump[k] = fp.id
	if had {
		f.unref(prev)
	}
	return nil
}

// unref frees a program a jump slot no longer holds, if nothing else does.
func (f *fakeKernel) unref(id ebpf.ProgramID) {
	if p := f.progs[id]; p != nil {
		f.gcProg(p)
	}
}

func (f *fakeKernel) ClearPolicy(slot uint32, dir int) error {
	if err := f.op("ClearPolicy", "slot=%d dir=%d", slot, dir); err != nil {
		return err
	}
	k := [2]uint32{slot, uint32(dir)}
	prev, had := f.jump[k]
	delete(f.jump, k)
	if had {
		f.unref(prev)
	}
	return nil
}

func (f *fakeKernel) Policies() ([]tcbpf.PolicyEntry, error) {
	if err := f.read("Policies"); err != nil {
		return nil, err
	}
	var out []tcbpf.PolicyEntry
	for k, id := range f.jump {
		out = append(out, tcbpf.PolicyEntry{Slot: k[0], Dir: int(k[1]), Prog: id})
	}
	slices.SortFunc(out, func(a, b tcbpf.PolicyEntry) int { return int(2*a.Slot) + a.Dir - int(2*b.Slot) - b.Dir })
	return out, nil
}

// --- endpointNet

func (f *fakeKernel) ConfigureEndpoint(iface string, _ int, _ net.HardwareAddr, nets []netip.Prefix) error {
	if err := f.read("ConfigureEndpoint"); err != nil {
		return err
	}
	if _, ok := f.Ifindex(iface); !ok {
		return nl.ErrNoLink
	}
	if slices.Equal(f.nets[iface], nets) {
		return nil // read back: nothing to write
	}
	return f.configure("ConfigureEndpoint", iface, nets)
}

func (f *fakeKernel) ConfigureNewEndpoint(iface string, _ int, _ net.HardwareAddr, nets []netip.Prefix) error {
	if _, ok := f.Ifindex(iface); !ok {
		return nl.ErrNoLink
	}
	return f.configure("ConfigureNewEndpoint", iface, nets)
}

func (f *fakeKernel) configure(op, iface string, nets []netip.Prefix) error {
	if err := f.op(op, "%s %v", iface, nets); err != nil {
		return err
	}
	f.nets[iface] = slices.Clone(nets)
	return nil
}

func (f *fakeKernel) UnconfigureEndpoint(iface string, nets []netip.Prefix) error {
	if err := f.op("UnconfigureEndpoint", "%s %v", iface, nets); err != nil {
		return err
	}
	f.nets[iface] = slices.DeleteFunc(f.nets[iface], func(p netip.Prefix) bool { return slices.Contains(nets, p) })
	if len(f.nets[iface]) == 0 {
		delete(f.nets, iface)
	}
	return nil
}

func (f *fakeKernel) ListDpdRoutes() ([]netlink.Route, error) {
	if err := f.read("ListDpdRoutes"); err != nil {
		return nil, err
	}
	var out []netlink.Route
	for iface, nets := range f.nets {
		for _, p := range nets {
			idx, _ := f.Ifindex(iface)
			out = append(out, netlink.Route{LinkIndex: idx,
				Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}})
		}
	}
	return out, nil
}

// --- programFacility

// fakeProg is a loaded policy program, or one an earlier dpd pinned.
type fakeProg struct {
	f    *fakeKernel
	id   ebpf.ProgramID
	name string
	pin  string // pin directory; "" when unpinned
	held bool   // this process holds it (loaded or adopted)
}

func (f *fakeKernel) newProg(name string) *fakeProg {
	f.nextProg++
	p := &fakeProg{f: f, id: f.nextProg, name: name}
	f.progs[p.id] = p
	return p
}

// pinProg leaves a program as an earlier dpd would: pinned, installed
// nowhere yet, held by nobody.
func (f *fakeKernel) pinProg(dir model.Direction, policy string) *fakeProg {
	pol := f.policy(policy)
	key := progKey{hash: pol.Hash(), dir: dir}
	p := f.newProg(dir.String() + ":" + policy)
	p.pin = path.Join(fakeProgsDir, key.pinName())
	f.pins[p.pin] = p.id
	return p
}

func (f *fakeKernel) Load(pol *model.DirectionPolicy, dir model.Direction) (loadedProgram, error) {
	f.loadMu.Lock()
	defer f.loadMu.Unlock()
	name, ok := f.names[pol.Hash()]
	if !ok {
		name = "unnamed"
	}
	if err := f.op("Load", "%s:%s", dir, name); err != nil {
		return nil, err
	}
	p := f.newProg(dir.String() + ":" + name)
	p.held = true
	return p, nil
}

func (f *fakeKernel) Adopt(pol *model.DirectionPolicy, dir model.Direction, pp pinnedProgram) (loadedProgram, error) {
	p := pp.(*fakeProg)
	if err := f.read("Adopt"); err != nil {
		return nil, err
	}
	p.held = true
	return p, nil
}

func (f *fakeKernel) ProgsDir() string { return fakeProgsDir }

func (f *fakeKernel) PinnedNames() ([]string, error) {
	if err := f.read("PinnedNames"); err != nil {
		return nil, err
	}
	var out []string
	for d := range f.pins {
		out = append(out, path.Base(d))
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeKernel) OpenPinned(name string) (pinnedProgram, error) {
	d := path.Join(fakeProgsDir, name)
	p := f.progs[f.pins[d]]
	if p == nil || p.pin != d {
		return nil, fmt.Errorf("open %s: incomplete", name)
	}
	return p, nil
}

func (f *fakeKernel) RemovePinDir(dir string) error {
	if err := f.op("RemovePinDir", "%s", path.Base(dir)); err != nil {
		return err
	}
	delete(f.pins, dir)
	return nil
}

func (f *fakeKernel) ChainIndices() ([]uint32, error) {
	if err := f.read("ChainIndices"); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(f.chain)), nil
}

func (f *fakeKernel) ChainIndexInUse(uint32) bool { return false }

func (f *fakeKernel) DeleteChainIndex(idx uint32) error {
	if err := f.op("DeleteChainIndex", "%d", idx); err != nil {
		return err
	}
	delete(f.chain, idx)
	return nil
}

func (f *fakeKernel) CounterIDs() ([]uint64, error) {
	if err := f.read("CounterIDs"); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(f.counters)), nil
}

func (f *fakeKernel) EnsureCounters(ids []uint64) error {
	f.loadMu.Lock()
	defer f.loadMu.Unlock()
	for _, id := range ids {
		f.counters[id] = true
	}
	return nil
}

func (f *fakeKernel) DeleteCounters(ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	if err := f.op("DeleteCounters", "%v", ids); err != nil {
		return err
	}
	for _, id := range ids {
		delete(f.counters, id)
	}
	return nil
}

// fakeProg as loadedProgram and pinnedProgram.

func (p *fakeProg) Head() *ebpf.Program       { return nil }
func (p *fakeProg) Rules() []polprog.RuleInfo { return nil }
func (p *fakeProg) PinDir() string            { return p.pin }
func (p *fakeProg) Dir() string               { return p.pin }
func (p *fakeProg) HeadID() ebpf.ProgramID    { return p.id }
func (p *fakeProg) Abandon()                  { p.held = false }

func (p *fakeProg) Pin(dir string) error {
	p.f.loadMu.Lock()
	defer p.f.loadMu.Unlock()
	if err := p.f.op("Pin", "%s", p.name); err != nil {
		return err
	}
	p.pin = dir
	p.f.pins[dir] = p.id
	return nil
}

func (p *fakeProg) Unpin() error {
	p.f.loadMu.Lock()
	defer p.f.loadMu.Unlock()
	if p.pin == "" {
		return nil
	}
	if err := p.f.op("Unpin", "%s", p.name); err != nil {
		return err
	}
	delete(p.f.pins, p.pin)
	p.pin = ""
	p.f.gcProg(p)
	return nil
}

func (p *fakeProg) Close() error {
	p.f.loadMu.Lock()
	defer p.f.loadMu.Unlock()
	if err := p.f.op("Close", "%s", p.name); err != nil {
		return err
	}
	p.held = false
	p.f.gcProg(p)
	return nil
}

func (p *fakeProg) Release(unpin bool) error {
	p.f.loadMu.Lock()
	defer p.f.loadMu.Unlock()
	if err := p.f.op("Release", "%s", p.name); err != nil {
		return err
	}
	p.held = false
	if unpin && p.pin != "" {
		delete(p.f.pins, p.pin)
		p.pin = ""
	}
	p.f.gcProg(p)
	return nil
}

// gcProg frees a program the kernel no longer references, as the kernel
// does: no pin, no holder, in no jump slot.
func (f *fakeKernel) gcProg(p *fakeProg) {
	if p.pin != "" || p.held || slices.Contains(slices.Collect(maps.Values(f.jump)), p.id) {
		return
	}
	delete(f.progs, p.id)
}

// --- sweepFacility

func (f *fakeKernel) RetainIPSets(keep []string) (int, error) {
	n := 0
	for s := range f.ipsets {
		if !slices.Contains(keep, s) {
			if err := f.op("RemoveIPSet", "%s", s); err != nil {
				return n, err
			}
			delete(f.ipsets, s)
			n++
		}
	}
	return n, nil
}

func (f *fakeKernel) ReleaseRetired([]int) (int, error) { return 0, nil }

// --- ipsetMaps

func (f *fakeKernel) ReplaceIPSet(id string, _ model.IPSetType, _ []model.IPSetMember) error {
	if err := f.op("ReplaceIPSet", "%s", id); err != nil {
		return err
	}
	f.ipsets[id] = true
	return nil
}

func (f *fakeKernel) UpdateIPSet(id string, _, _ []model.IPSetMember) error {
	if err := f.op("UpdateIPSet", "%s", id); err != nil {
		return err
	}
	f.ipsets[id] = true
	return nil
}

func (f *fakeKernel) RemoveIPSet(id string) error {
	if err := f.op("RemoveIPSet", "%s", id); err != nil {
		return err
	}
	delete(f.ipsets, id)
	return nil
}

// --- routeMaps, routeNet, tunnelNet, masqNet, natMaps: enough for the
// Kernel to compose; the route and service programmers have their own
// privileged tests.

func (f *fakeKernel) SetRoute(dst netip.Prefix, info tcbpf.RouteInfo) error {
	if err := f.op("SetRoute", "%s", dst); err != nil {
		return err
	}
	f.bpfRoutes[dst] = info
	return nil
}

func (f *fakeKernel) DeleteRoute(dst netip.Prefix) error {
	if err := f.op("DeleteBPFRoute", "%s", dst); err != nil {
		return err
	}
	delete(f.bpfRoutes, dst)
	return nil
}

func (f *fakeKernel) Routes() (map[netip.Prefix]tcbpf.RouteInfo, error) {
	return maps.Clone(f.bpfRoutes), f.read("Routes")
}

// fakeRouteNet is the fake's kernel routing table (its DeleteRoute is not
// the BPF map's).
type fakeRouteNet struct{ *fakeKernel }

func (f fakeRouteNet) DeleteRoute(r *netlink.Route) error {
	return f.op("DeleteKernelRoute", "%s", r.Dst)
}

func (f *fakeKernel) ReplaceRemoteRoute(r nl.RemoteRoute) error {
	if err := f.op("ReplaceRemoteRoute", "%s", r.Dst); err != nil {
		return err
	}
	f.kroutes[r.Dst] = r
	return nil
}

func (f *fakeKernel) DeleteRemoteRoute(r nl.RemoteRoute) error {
	if err := f.op("DeleteRemoteRoute", "%s", r.Dst); err != nil {
		return err
	}
	delete(f.kroutes, r.Dst)
	return nil
}

func (f *fakeKernel) RemoteRoutes(int) ([]netlink.Route, error) { return nil, f.read("RemoteRoutes") }

// fakeVXLANIfindex is the VXLAN device's ifindex once EnsureVXLAN made it.
const fakeVXLANIfindex = 50

func (f *fakeKernel) EnsureVXLAN(d nl.VXLANDevice) (int, error) {
	if err := f.op("EnsureVXLAN", "%s vni=%d addr=%s", d.Name, d.VNI, d.Addr); err != nil {
		return 0, err
	}
	return fakeVXLANIfindex, nil
}

// DeleteVXLAN deletes the device and, as the kernel does, the routes
// through it.
func (f *fakeKernel) DeleteVXLAN(name string) error {
	if err := f.op("DeleteVXLAN", "%s", name); err != nil {
		return err
	}
	maps.DeleteFunc(f.kroutes, func(_ netip.Prefix, r nl.RemoteRoute) bool { return r.Ifindex == fakeVXLANIfindex })
	return nil
}

func (f *fakeKernel) SetVXLANPeer(_ int, p nl.VXLANPeer) error {
	return f.op("SetVXLANPeer", "%s", p.TunnelIP)
}

func (f *fakeKernel) DeleteVXLANPeer(_ int, p nl.VXLANPeer) error {
	return f.op("DeleteVXLANPeer", "%s", p.TunnelIP)
}

func (f *fakeKernel) SyncVXLANPeers(_ int, peers []nl.VXLANPeer) error {
	return f.op("SyncVXLANPeers", "%d", len(peers))
}

func (f *fakeKernel) SyncMasquerade(masq, all []netip.Prefix) error {
	if err := f.op("SyncMasquerade", "%v %v", masq, all); err != nil {
		return err
	}
	f.masq = fmt.Sprint(masq, all)
	return nil
}

func (f *fakeKernel) NATFrontends() ([]tcbpf.NATFrontendEntry, error) {
	if err := f.read("NATFrontends"); err != nil {
		return nil, err
	}
	var out []tcbpf.NATFrontendEntry
	for fe, id := range f.natFE {
		out = append(out, tcbpf.NATFrontendEntry{Frontend: fe, ID: id, Count: len(f.natBE[id])})
	}
	return out, nil
}

func (f *fakeKernel) NATBackendsOf(id uint32) ([]tcbpf.NATBackend, error) {
	return slices.Clone(f.natBE[id]), f.read("NATBackendsOf")
}

func (f *fakeKernel) ProgramNATPort(id uint32, fes []tcbpf.NATFrontend, bes []tcbpf.NATBackend, _ int) error {
	if err := f.op("ProgramNATPort", "%d %v -> %v", id, fes, bes); err != nil {
		return err
	}
	for _, fe := range fes {
		f.natFE[fe] = id
	}
	if len(bes) == 0 {
		delete(f.natBE, id)
	} else {
		f.natBE[id] = slices.Clone(bes)
	}
	return nil
}

func (f *fakeKernel) DeleteNATFrontend(fe tcbpf.NATFrontend) error {
	if err := f.op("DeleteNATFrontend", "%s", fe); err != nil {
		return err
	}
	delete(f.natFE, fe)
	return nil
}

func (f *fakeKernel) DeleteNATPort(id uint32, _ int) error {
	if err := f.op("DeleteNATPort", "%d", id); err != nil {
		return err
	}
	delete(f.natBE, id)
	return nil
}

func (f *fakeKernel) DeleteNATBackendsExcept(keep map[uint32]bool) (int, error) {
	if err := f.read("DeleteNATBackendsExcept"); err != nil {
		return 0, err
	}
	n := 0
	for id := range f.natBE {
		if !keep[id] {
			if err := f.op("DeleteNATPort", "%d", id); err != nil {
				return n, err
			}
			delete(f.natBE, id)
			n++
		}
	}
	return n, nil
}

func (f *fakeKernel) FlushNATFlows(fl tcbpf.NATFlowFilter) (int, error) {
	var what []string
	for id := range fl.Services {
		what = append(what, fmt.Sprintf("service %d", id))
	}
	for b := range fl.Backends {
		what = append(what, fmt.Sprintf("backend %d/%s", b.ID, b.Backend))
	}
	slices.Sort(what)
	return 0, f.op("FlushNATFlows", "%s", strings.Join(what, ", "))
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
