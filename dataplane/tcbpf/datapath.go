package tcbpf

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/bpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// Options configure Open.
type Options struct {
	PinDir        string   // default abi.PinDir
	ForceLegacyTC bool     // attach with clsact + cls_bpf even where TCX works
	Sizes         MapSizes // zero fields take DefaultMapSizes
	Log           *slog.Logger
	// Epilogue is how policy programs call the epilogue (EpilogueAuto:
	// measured at Open).
	Epilogue EpilogueCall
	// StackForwarding leaves packets between this node's workloads to the
	// host's IP stack; by default dpd_from_wep redirects them straight to
	// the destination's interface (bpf/dpd_fwd.h).
	StackForwarding bool
	// HostSideDelivery keeps the redirect of an established flow's packet
	// on the destination's host-side interface, where captures see it; by
	// default it goes straight into the destination workload's namespace
	// (bpf_redirect_peer, bpf/dpd_fwd.h).
	HostSideDelivery bool
}

// Maps are the pinned maps shared with the policy programs. The handles
// belong to the Datapath: do not close them.
type Maps struct {
	State     *ebpf.Map // PERCPU_ARRAY[1] struct dpd_state
	Jump      *ebpf.Map // PROG_ARRAY: epilogue + policies
	IfState   *ebpf.Map // HASH ifindex -> struct dpd_ifstate
	IPSets    *ebpf.Map // LPM_TRIE struct dpd_ipset_key -> u32
	IPSetIDs  *ebpf.Map // HASH struct dpd_ipset_name -> set id
	Conntrack *ebpf.Map // HASH struct dpd_ct_key -> struct dpd_ct_val (dpd_conntrack)
	// ConntrackOld is an older dpd's LRU dpd_ct, the same layout, or a
	// one-entry stand-in (ctold.go).
	ConntrackOld *ebpf.Map
	RuleCtrs     *ebpf.Map // PERCPU_HASH u64 -> struct dpd_counter
	Chain        *ebpf.Map // PROG_ARRAY: policy continuations
	Trace        *ebpf.Map // ARRAY[1] struct dpd_state: last trace run
	// Added by the services-and-routes work.
	NATFrontends *ebpf.Map // HASH struct dpd_nat_fe_key -> struct dpd_nat_fe_val
	NATBackends  *ebpf.Map // HASH struct dpd_nat_be_key -> struct dpd_nat_be_val
	Routes       *ebpf.Map // LPM_TRIE struct dpd_route_key -> struct dpd_route_val
	// Added by the fragments work.
	Frags    *ebpf.Map // LRU_HASH struct dpd_frag_key -> struct dpd_frag_val
	DropCtrs *ebpf.Map // PERCPU_ARRAY[abi.DropMax] struct dpd_counter
	// Added by the flow-events work (events.go).
	Events  *ebpf.Map // RINGBUF of struct dpd_flow_event
	EvDrops *ebpf.Map // PERCPU_ARRAY[1] u64
	EvCfg   *ebpf.Map // ARRAY[1] struct dpd_ev_cfg
	EvDeny  *ebpf.Map // ARRAY u32 -> struct dpd_ev_deny (direct-mapped by flow)
	CTCfg   *ebpf.Map // ARRAY[1] struct dpd_ct_cfg (ctold.go)
}

// Programs are the loaded entry programs and the epilogue.
type Programs struct {
	FromWEP  *ebpf.Program // TC ingress of the host veth
	ToWEP    *ebpf.Program // TC egress of the host veth
	Epilogue *ebpf.Program
}

// Datapath owns the loaded entry object. Methods are safe for concurrent
// use; map writes are atomic in the kernel, and the in-memory IP set
// bookkeeping is under mu.
type Datapath struct {
	opts  Options
	log   *slog.Logger
	objs  bpf.DpdObjects
	sizes MapSizes
	// nl is one rtnetlink socket for every per-interface query and change
	// (a socket per call costs more than the query), opened in the network
	// namespace of the goroutine that called Open. Safe for concurrent use.
	nl *netlink.Handle
	// ops observes what the real attaches and detaches cost.
	ops opCounters
	// epi are the epilogue arrays (epilogue.go), set by Open.
	epi *epilogues

	// want describes the loaded programs, to recognise attachments that
	// are already current (same tag, same maps). Immutable after Open.
	want map[*ebpf.Program]progIdentity
	// ownIDs are the kernel ids of the programs in want, ownMapIDs those
	// of dpd_ifstate and dpd_jump, which entry programs of this Datapath
	// use. Immutable after Open.
	ownIDs    map[ebpf.ProgramID]bool
	ownMapIDs map[ebpf.MapID]bool
	// ctFlags mirrors dpd_ct_cfg (ctold.go); ctClean counts the scans in
	// a row that found the older dpd_ct empty. ctOld: Open found an
	// older dpd's dpd_ct pinned. Immutable after Open.
	ctFlags atomic.Uint32
	ctClean atomic.Int32
	ctOld   bool

	traceMu sync.Mutex // serialises trace runs: dpd_trace has one entry
	// clockMu serialises clock syncs; clockFirst is the sample the tick
	// is learnt from, clockPending a tick learnt and not yet published
	// (clock.go). Guarded by clockMu.
	clockMu      sync.Mutex
	clockFirst   ClockState
	clockPending uint64
	clockWarned  bool
	// ifMu serialises the two writes of an interface's entry (ifstate.go).
	ifMu sync.Mutex

	ctrs counterMirror // the keys of dpd_rule_ctrs (usage.go); has its own lock

	feFilter natFilter // dpd_nat_fe_bits bookkeeping (nat.go); has its own lock

	// migrations are the pinned maps Open migrated. Immutable after Open.
	migrations []MigrationReport

	mu   sync.Mutex
	sets map[string]*ipset   // by encoded name key; guarded by mu
	ids  map[uint32]struct{} // set ids in use; guarded by mu
	// setIdx mirrors dpd_ipset_idx (ipset_index.go); guarded by mu.
	setIdx *ipsetIndex
}

// Open loads the entry object with its maps pinned under opts.PinDir
// (reusing existing pins) and installs the epilogue.
func Open(opts Options) (*Datapath, error) {
	if opts.PinDir == "" {
		opts.PinDir = abi.PinDir
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	opts.Sizes = opts.Sizes.withDefaults()
	if err := opts.Sizes.validate(); err != nil {
		return nil, err
	}
	for _, dir := range []string{opts.PinDir, filepath.Join(opts.PinDir, "links")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create pin dir: %w", err)
		}
	}

	spec, err := bpf.LoadDpd()
	if err != nil {
		return nil, fmt.Errorf("load entry object spec: %w", err)
	}
	applySizes(spec, opts.Sizes)
	ctOld, err := prepareCTOld(spec, opts.PinDir)
	if err != nil {
		return nil, err
	}

	nlh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	d := &Datapath{
		opts:  opts,
		log:   opts.Log,
		nl:    nlh,
		sizes: opts.Sizes,
		sets:  map[string]*ipset{},
		ids:   map[uint32]struct{}{},

		ctOld: ctOld,
	}
	if err := d.migratePins(spec); err != nil {
		nlh.Close()
		return nil, err
	}
	err = spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: opts.PinDir},
	})
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			// The whole verifier log says why; the error alone does not.
			nlh.Close()
			return nil, fmt.Errorf("load entry programs: %w\n%s", err, strings.Join(verr.Log, "\n"))
		}
		nlh.Close()
		return nil, fmt.Errorf("load entry programs: %w", err)
	}
	if err := d.init(); err != nil {
		_ = d.epi.close()
		_ = d.objs.Close()
		nlh.Close()
		return nil, err
	}
	return d, nil
}

func (d *Datapath) init() error {
	d.want = map[*ebpf.Program]progIdentity{}
	for _, p := range []*ebpf.Program{d.objs.DpdFromWep, d.objs.DpdToWep, d.objs.DpdEpilogue, d.objs.DpdHepIn, d.objs.DpdHepOut, d.objs.DpdHepInCont, d.objs.DpdHepOutCont} {
		id, err := identify(p)
		if err != nil {
			return err
		}
		d.want[p] = id
	}
	d.ownIDs = map[ebpf.ProgramID]bool{}
	for _, id := range d.want {
		d.ownIDs[id.id] = true
	}
	d.ownMapIDs = map[ebpf.MapID]bool{}
	for _, m := range []*ebpf.Map{d.objs.DpdIfstate, d.objs.DpdJump} {
		info, err := m.Info()
		if err != nil {
			return fmt.Errorf("map info: %w", err)
		}
		if id, ok := info.ID(); ok {
			d.ownMapIDs[id] = true
		}
	}
	// Before the epilogue, which the attached entry programs share.
	if err := d.initCTCfg(); err != nil {
		return err
	}
	if err := d.setFwdCfg(d.opts.StackForwarding, d.opts.HostSideDelivery); err != nil {
		return err
	}
	// Before this Datapath attaches an entry program that reads it.
	if err := d.syncIfStateArr(); err != nil {
		return err
	}
	if err := d.SyncClock(); err != nil {
		return err
	}
	// A restart finds the previous epilogue installed; an equivalent one
	// stays, so starting writes nothing to dpd_jump.
	var cur uint32
	err := d.objs.DpdJump.Lookup(uint32(abi.JumpEpilogue), &cur)
	if err != nil || !d.isCurrent(ebpf.ProgramID(cur), d.objs.DpdEpilogue) {
		if err := d.objs.DpdJump.Update(uint32(abi.JumpEpilogue), d.objs.DpdEpilogue, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("install epilogue: %w", err)
		}
	}
	if err := d.installHepContinuations(); err != nil {
		return err
	}
	if err := d.openEpilogues(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loadIPSetsLocked()
}

// applySizes sets max_entries from the configured sizes.
func applySizes(spec *ebpf.CollectionSpec, s MapSizes) {
	for name, n := range map[string]int{
		abi.MapConntrack:    s.Conntrack,
		abi.MapIPSets:       s.IPSets,
		abi.MapIfState:      s.IfState,
		abi.MapRuleCtrs:     s.RuleCounters,
		abi.MapJump:         s.Jump,
		abi.MapChain:        s.Chain,
		abi.MapIPSetIDs:     ipsetIDsSize,
		abi.MapNATFrontends: s.NATFrontend,
		abi.MapNATBackends:  s.NATBackend,
		abi.MapRoutes:       s.Routes,
		abi.MapFrags:        s.Fragments,
		abi.MapEvents:       s.Events,
		abi.MapEvDeny:       s.EventDeny,
		abi.MapPreview:      s.Jump,
	} {
		if m, ok := spec.Maps[name]; ok {
			m.MaxEntries = uint32(n)
		}
	}
}

// Close releases the Datapath's file descriptors. Pins, links and attached
// programs stay, so a restarted dpd adopts them.
func (d *Datapath) Close() error {
	d.nl.Close()
	return errors.Join(d.setIdx.close(), d.epi.close(), d.objs.Close())
}

// PinDir is the directory the maps and links are pinned in.
func (d *Datapath) PinDir() string { return d.opts.PinDir }

// Sizes are the map sizes in effect.
func (d *Datapath) Sizes() MapSizes { return d.sizes }

// Maps returns the shared map handles.
func (d *Datapath) Maps() Maps {
	o := &d.objs
	return Maps{
		State: o.DpdState, Jump: o.DpdJump, IfState: o.DpdIfstate, IPSets: o.DpdIpsets,
		IPSetIDs: o.DpdIpsetIds, Conntrack: o.DpdConntrack, ConntrackOld: o.DpdCt, RuleCtrs: o.DpdRuleCtrs,
		Chain: o.DpdChain, Trace: o.DpdTrace,
		NATFrontends: o.DpdNatFe, NATBackends: o.DpdNatBe, Routes: o.DpdRoutes,
		Frags: o.DpdFrags, DropCtrs: o.DpdDropCtrs,
		Events: o.DpdEvents, EvDrops: o.DpdEvDrops, EvCfg: o.DpdEvCfg, EvDeny: o.DpdEvDeny,
		CTCfg: o.DpdCtCfg,
	}
}

// Programs returns the loaded entry programs.
func (d *Datapath) Programs() Programs {
	return Programs{FromWEP: d.objs.DpdFromWep, ToWEP: d.objs.DpdToWep, Epilogue: d.objs.DpdEpilogue}
}

// entryProgram is the entry program of a direction.
func (d *Datapath) entryProgram(dir int) (*ebpf.Program, error) {
	switch dir {
	case abi.DirFromWEP:
		return d.objs.DpdFromWep, nil
	case abi.DirToWEP:
		return d.objs.DpdToWep, nil
	}
	return nil, fmt.Errorf("direction %d: want %d or %d", dir, abi.DirFromWEP, abi.DirToWEP)
}
