package linux

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
)

// Options configure New.
type Options struct {
	// PinDir holds dpd's pinned maps and links (default /sys/fs/bpf/dpd).
	PinDir string
	// AllowPrivateBPFFS accepts, and mounts if need be, a bpffs at
	// /sys/fs/bpf that only dpd's mount namespace sees (the operator asked).
	AllowPrivateBPFFS bool
	// ForceLegacyTC attaches with clsact + filters even where TCX works.
	ForceLegacyTC bool
	// AttachMode is "auto" (measure the kernel at start and attach the
	// cheaper way), "tcx" or "tc"; empty means "tcx" unless ForceLegacyTC.
	AttachMode string
	// Hostname is this node's name (whose VTEP and routes are local) when
	// the ConfigUpdate has no FelixHostname; default os.Hostname().
	Hostname string
	// GCInterval is the period of garbage collection after the first one,
	// which follows the first apply after InSync (default 60 s).
	GCInterval time.Duration
	Log        *slog.Logger
	// AfterAttach, when set, runs in ApplyEndpoint right after an
	// endpoint's entry programs are attached and before its policy is
	// installed: the point where a crash leaves an interface attached but
	// not ready. Only crash tests set it (see CrashAfterAttachEnv).
	AfterAttach func(iface string)
	// Flows configures flow events (flows.go); on by default.
	Flows FlowOptions
	// Epilogue is how policy programs call the epilogue (tcbpf decides
	// by default); tests force one.
	Epilogue tcbpf.EpilogueCall
	// StackForwarding routes packets between this node's workloads
	// through the host's IP stack instead of redirecting them to the
	// destination's interface (tcbpf.Options.StackForwarding).
	StackForwarding bool
	// HostSideDelivery keeps established flows' packets between workloads
	// on the destination's host-side interface instead of delivering them
	// into its namespace (tcbpf.Options.HostSideDelivery).
	HostSideDelivery bool
}

// Kernel implements engine.Kernel on Linux by composing one programmer
// per concern, each over narrow facilities (facilities.go): endpoints
// (attach, verify, fail closed), policy programs (shared, pinned,
// preloaded), garbage collection, routes, tunnels, masquerading and
// services. The engine calls it from one goroutine; Inspect, the link
// monitor, the attach worker and the periodic collection call
// concurrently, so every call takes mu and the programmers run under it,
// except the attaches themselves, which run without it (attachq.go).
type Kernel struct {
	opts   Options
	log    *slog.Logger
	mon    *nl.Monitor
	cfg    *nl.Configurer
	links  linkFacility  // the monitor as the programmers see it; immutable
	netFac netFacilities // immutable

	mu  sync.Mutex
	bpf *tcbpf.Datapath // guarded by mu; reopened only before the first endpoint
	// reloader is the direct reloader (directreload.go); nil when the
	// datapath calls the epilogue indirectly. Guarded by mu.
	reloader *directReloader
	// lastApply is when a call of the engine's last touched the kernel: the
	// end of an endpoint's or host endpoint's apply or removal or of the
	// to-host policy's apply, each preload, the end of a pass. The reloader
	// starts a load only after reloadQuiet without one. Guarded by mu.
	lastApply time.Time
	sizes     tcbpf.MapSizes // guarded by mu
	// rpfPrefixes: the prefixes the IPv6 source check was last written
	// for (rpfDone: at all). Guarded by mu.
	rpfPrefixes []string
	rpfDone     bool

	// The programmers, each owning its concern's state. eps, pols and the
	// collector's facilities are rebuilt when the datapath is reopened.
	eps     *endpointProgrammer // endpoints.go, failclosed.go, adopt.go
	pols    *policyProgrammer   // programs.go, preload.go
	gc      *collector          // gc.go
	routes  *routeProgrammer    // routes.go
	tunnels *tunnelProgrammer   // vtep.go
	masq    *masqProgrammer     // masquerade.go
	svcs    *serviceProgrammer  // services.go
	ipsets  ipsetMaps           // written as the engine says; the collector keeps the rest

	// attachQ holds the interfaces waiting for the attach worker and the
	// attaches running without mu; it outlives a reopen of the datapath.
	// attachCond (over mu) is broadcast when an attach, a direct
	// reload's load or a preload ends.
	attachQ    *attachQueue
	attachCond *sync.Cond
	// preloadWorkers counts the preload workers running (preload.go).
	preloadWorkers int

	applied    bool          // the first apply after InSync has ended; guarded by mu
	ops        Ops           // shared by the programmers; guarded by mu
	started    time.Time     // immutable
	adopted    adoption      // what the start found; guarded by mu
	gcInterval time.Duration // immutable
	closed     bool          // Close ran; guarded by mu
	// applyStarted: the first apply configured the kernel; opsBase is ops
	// at that moment. Guarded by mu.
	applyStarted bool
	opsBase      Ops
	gcDone       bool            // the post-restart garbage collection ran; guarded by mu
	logged       map[string]bool // one-time warnings given; guarded by mu
	ctCount      ctCount         // the last conntrack count (inspect.go); guarded by mu
	flows        *flowWatcher    // flow events (flows.go); set by the first open, guarded by mu
	failsafesSet bool            // dpd_failsafes holds a valid list; guarded by mu

	// The current datapath's conntrack scanner (flowends.go) and staged
	// previews (preview.go; nil unless FlowOptions.StagedPreview). Guarded by mu.
	scan    *ctScanner
	preview *previewProgrammer

	attach tcbpf.AttachChoice // the attach mode in force and why; immutable
}

// chooseAttach resolves opts' attach mode; auto measures the kernel, and
// keeps what an earlier dpd on this boot chose.
func chooseAttach(opts Options) (tcbpf.AttachChoice, error) {
	mode := opts.AttachMode
	if mode == "" {
		mode = string(tcbpf.AttachTCX)
		if opts.ForceLegacyTC {
			mode = string(tcbpf.AttachTC)
		}
	}
	c, err := tcbpf.ChooseAttachMode(mode, tcbpf.MeasureKernelCosts)
	if err != nil {
		return c, fmt.Errorf("attach mode: %w", err)
	}
	pinned, err := tcbpf.PinAttachChoice(opts.PinDir, c, mode == tcbpf.AttachAuto)
	if err != nil {
		opts.Log.Warn("attach mode: no pinned choice; a restart measures again", "err", err)
	}
	return pinned, nil
}

// AttachChoice reports the attach mode in force, why, and the kernel costs
// it was chosen from (zero when the mode was requested explicitly).
func (k *Kernel) AttachChoice() tcbpf.AttachChoice { return k.attach }

// New checks the host, starts nothing yet, and opens the BPF side with
// default map sizes (Configure may resize before the first endpoint).
func New(opts Options) (*Kernel, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if err := CheckHost(opts.AllowPrivateBPFFS); err != nil {
		return nil, fmt.Errorf("linux dataplane unavailable: %w", err)
	}
	mon, err := nl.NewMonitor(nl.MonitorConfig{Prefixes: []string{nl.DefaultPrefix}, Logger: opts.Log})
	if err != nil {
		return nil, fmt.Errorf("interface monitor: %w", err)
	}
	cfg, err := nl.NewConfigurer(nl.Config{Logger: opts.Log})
	if err != nil {
		_ = mon.Close()
		return nil, fmt.Errorf("netlink: %w", err)
	}
	if err := cfg.ConfigureHost(); err != nil {
		_ = mon.Close()
		_ = cfg.Close()
		return nil, fmt.Errorf("host config: %w", err)
	}
	logIPv6State(opts.Log, cfg)
	choice, err := chooseAttach(opts)
	if err != nil {
		_ = mon.Close()
		_ = cfg.Close()
		return nil, err
	}
	opts.ForceLegacyTC = choice.Mode == tcbpf.AttachTC
	opts.Log.Info("attach mode", "mode", choice.Mode, "reason", choice.Reason)
	if opts.GCInterval <= 0 {
		opts.GCInterval = DefaultGCInterval
	}
	sizes, pinned, err := tcbpf.PinnedSizes(opts.PinDir)
	if err != nil {
		_ = mon.Close()
		_ = cfg.Close()
		return nil, err
	}
	if !pinned {
		sizes = tcbpf.DefaultMapSizes()
	}
	k := newKernel(opts, realNet(mon, cfg))
	k.mon, k.cfg, k.sizes = mon, cfg, sizes
	k.attach = choice
	if err := k.openBPFLocked(); err != nil {
		_ = mon.Close()
		_ = cfg.Close()
		return nil, err
	}
	return k, nil
}

// newKernel composes the programmers that need no BPF side yet.
func newKernel(opts Options, net netFacilities) *Kernel {
	k := &Kernel{
		opts:       opts,
		log:        opts.Log,
		links:      net.links,
		started:    time.Now(),
		gcInterval: opts.GCInterval,
		logged:     map[string]bool{},
		attachQ:    newAttachQueue(),
	}
	k.attachCond = sync.NewCond(&k.mu)
	k.netFac = net
	k.tunnels = newTunnelProgrammer(net.tunnel, defaultHostname(opts.Hostname))
	k.routes = newRouteProgrammer(nil, net.routes, k.tunnels, k.logOnceLocked)
	k.routes.ipv6, k.tunnels.ipv6 = net.ipv6, net.ipv6
	k.tunnels.routes = k.routes
	k.masq = &masqProgrammer{net: net.masq}
	k.gc = &collector{log: k.log, ops: &k.ops, interval: opts.GCInterval, knownSets: map[string]bool{}}
	return k
}

func (k *Kernel) openBPFLocked() error {
	d, err := tcbpf.Open(tcbpf.Options{
		PinDir:        k.opts.PinDir,
		ForceLegacyTC: k.opts.ForceLegacyTC,
		Sizes:         k.sizes,
		Log:           k.log,
		Epilogue:      k.opts.Epilogue,

		StackForwarding:  k.opts.StackForwarding,
		HostSideDelivery: k.opts.HostSideDelivery,
	})
	if err != nil {
		return fmt.Errorf("open bpf dataplane: %w", err)
	}
	k.bpf = d
	if k.opts.StackForwarding {
		k.log.Info("packets between workloads are routed by the host's IP stack (--workload-redirect=false)")
	} else if k.opts.HostSideDelivery {
		k.log.Info("packets between workloads are redirected to the destination's interface, skipping the host's IP stack (--workload-redirect); all of them to its host side (--workload-redirect-peer=false)")
	} else {
		k.log.Info("packets between workloads are redirected to the destination's interface, skipping the host's IP stack (--workload-redirect); an established flow's straight into the destination's namespace, which captures on its host-side interface do not see (--workload-redirect-peer)")
	}
	if err := k.attachBPFLocked(realBPF(d), d.Sizes().Slots()); err != nil {
		_ = d.Close()
		return err
	}
	k.openPreviewsLocked(d)
	k.startReloaderLocked()
	k.startFlowsLocked(d)
	k.startScanLocked(d, !k.opts.Flows.Off)
	return nil
}

// attachBPFLocked builds the programmers over an opened BPF side and
// adopts what an earlier dpd left in it.
func (k *Kernel) attachBPFLocked(fac bpfFacilities, slots uint32) error {
	k.routes.maps = fac.routes
	k.ipsets = fac.ipsets
	k.svcs = newServiceProgrammer(fac.nat, k.log)
	if err := k.svcs.adopt(); err != nil {
		return fmt.Errorf("adopt service maps: %w", err)
	}
	k.pols = newPolicyProgrammer(fac.programs, k.log, &k.ops)
	k.eps = newEndpointProgrammer(fac.entry, k.netFac.endpoint, k.links, k.pols, slots, k.attachQ, k.log, &k.ops)
	k.eps.afterAttach = k.opts.AfterAttach
	k.eps.host = fac.host
	k.eps.applied = k.applied
	k.gc.eps, k.gc.pols, k.gc.sweep = k.eps, k.pols, fac.sweep
	a, err := k.eps.adopt()
	if err != nil {
		k.pols.abandon()
		return fmt.Errorf("adopt programmed state: %w", err)
	}
	k.adopted = a
	if a != (adoption{}) {
		k.log.Info("adopted the dataplane an earlier dpd programmed; it stays as it is until the controller is in sync",
			"endpoints", a.endpoints, "fail_closed", a.closed, "policy_programs", a.programs, "stale_ifstate", a.stale)
	}
	return nil
}

// Close releases file descriptors. Attached programs, pinned maps and
// links stay, so the next start adopts them and no packet is dropped.
func (k *Kernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	k.closed = true
	k.waitWorkersLocked() // they use the datapath's programs and maps
	k.stopReloaderLocked()
	k.stopFlowsLocked()
	k.stopScanLocked()
	if k.preview != nil {
		k.preview.abandon()
		k.preview = nil
	}
	if k.flows != nil {
		k.flows.hist.Close()
	}
	k.pols.abandon()
	if k.mon != nil {
		_ = k.mon.Close()
	}
	if k.cfg != nil {
		_ = k.cfg.Close()
	}
	if k.bpf != nil {
		return k.bpf.Close()
	}
	return nil
}

// datapath is the BPF side, for what does not need the rest of the
// kernel's state (IP sets) and for tests. It stays inside this package:
// Configure may close and reopen it.
func (k *Kernel) datapath() *tcbpf.Datapath {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.bpf
}

// Configure applies the ConfigUpdate keys the kernel uses: InterfacePrefix,
// the node name and VXLAN settings (vtep.go) and the BPF map sizes. Sizes
// can change only before the engine programs any endpoint, route or
// service (what a restart adopted does not count: the maps are migrated
// with their contents and adopted again); later changes need a restart
// and are logged.
func (k *Kernel) Configure(cfg map[string]string) error {
	prefixes := nl.ParsePrefixes(cfg["InterfacePrefix"])
	k.mon.SetPrefixes(prefixes)
	sizes, err := tcbpf.MapSizesFromConfig(cfg)
	if err != nil {
		return fmt.Errorf("map sizes: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.syncIPv6RPFLocked(prefixes); err != nil {
		return err
	}
	if err := k.tunnels.configure(cfg); err != nil {
		return err
	}
	if !k.applied && !k.applyStarted {
		// The first apply after InSync starts here: what it costs is
		// reported against this baseline.
		k.applyStarted = true
		k.opsBase = k.ops
		k.opsBase.Netlink = k.netStats()
	}
	if sizes == k.sizes {
		k.configureFailsafesLocked(cfg)
		return nil
	}
	if k.eps.claimed() || len(k.routes.routes) > 0 || len(k.svcs.services) > 0 {
		k.log.Warn("BPF map sizes changed; they take effect at the next restart", "want", sizes, "have", k.sizes)
		return nil
	}
	k.sizes = sizes
	k.stopReloaderLocked() // before the attaches: its wait releases mu
	k.waitWorkersLocked()  // they use the datapath about to close
	k.pols.abandon()
	k.stopFlowsLocked()
	k.stopScanLocked()
	if k.preview != nil {
		k.preview.abandon()
		k.preview = nil
	}
	if err := k.bpf.Close(); err != nil {
		k.log.Warn("close bpf dataplane before resize", "err", err)
	}
	if err := k.openBPFLocked(); err != nil {
		return err
	}
	k.configureFailsafesLocked(cfg)
	return nil
}

// Link reports an interface's state from the monitor's cache.
func (k *Kernel) Link(name string) model.LinkState { return k.mon.LinkState(name) }

// EndApply finishes an apply pass: the nat_outgoing table when pools
// changed, the flush of connections pinned to removed service backends,
// and, after the first pass (which covers everything the controller
// wants), the removal of routes and services an earlier dpd left, and the
// release of programs preloaded for endpoints that were not applied after
// all. Other shared policy programs need nothing here: they are released
// as soon as their last endpoint moves off them.
func (k *Kernel) EndApply() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.noteApplyLocked()
	var errs []error
	if k.routes.poolsDirty {
		if err := k.masq.sync(k.routes.pools()); err != nil {
			errs = append(errs, err)
		} else {
			k.routes.poolsDirty = false
		}
	}
	if !k.gcDone {
		gcErr := errors.Join(k.routes.gc(), k.svcs.gc())
		if gcErr != nil {
			errs = append(errs, fmt.Errorf("garbage collection: %w", gcErr))
		} else {
			k.gcDone = true
		}
	}
	if err := k.svcs.flushFlows(); err != nil {
		errs = append(errs, err)
	}
	k.waitPreloadsLocked() // an endpoint not applied after all may leave some
	k.pols.releaseUnusedPreloads()
	k.wakeReloaderLocked()
	if !k.applied {
		k.applied = true
		k.eps.applied = true
		if err := k.afterFirstApplyLocked(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// logOnceLocked logs msg the first time key is seen.
func (k *Kernel) logOnceLocked(key, msg string) {
	if !k.logged[key] {
		k.logged[key] = true
		k.log.Warn(msg)
	}
}

// ReplaceIPSet implements engine.IPSetKernel.
func (k *Kernel) ReplaceIPSet(id string, typ model.IPSetType, members []model.IPSetMember) error {
	k.mu.Lock()
	k.gc.knownSets[id] = true
	m := k.ipsets
	k.mu.Unlock()
	return m.ReplaceIPSet(id, typ, members)
}

// UpdateIPSet implements engine.IPSetKernel.
func (k *Kernel) UpdateIPSet(id string, added, removed []model.IPSetMember) error {
	k.mu.Lock()
	k.gc.knownSets[id] = true
	m := k.ipsets
	k.mu.Unlock()
	return m.UpdateIPSet(id, added, removed)
}

// RemoveIPSet implements engine.IPSetKernel.
func (k *Kernel) RemoveIPSet(id string) error {
	k.mu.Lock()
	m := k.ipsets
	k.mu.Unlock()
	if err := m.RemoveIPSet(id); err != nil {
		return err
	}
	k.mu.Lock()
	delete(k.gc.knownSets, id)
	k.mu.Unlock()
	return nil
}

// netStats are the configurer's counts, zero without one.
func (k *Kernel) netStats() nl.Stats {
	if k.cfg == nil {
		return nl.Stats{}
	}
	return k.cfg.Stats()
}

var _ engine.Kernel = (*Kernel)(nil)
