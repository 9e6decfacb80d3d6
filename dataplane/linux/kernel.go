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
	// ForceLegacyTC attaches with clsact + filters even where TCX works.
	ForceLegacyTC bool
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
}

// Kernel implements engine.Kernel on Linux. The engine calls it from one
// goroutine; Inspect may read concurrently, so state is under mu.
type Kernel struct {
	opts Options
	log  *slog.Logger
	mon  *nl.Monitor
	cfg  *nl.Configurer

	mu    sync.Mutex
	bpf   *tcbpf.Datapath           // guarded by mu; reopened only before the first endpoint
	sizes tcbpf.MapSizes            // guarded by mu
	eps   map[string]*endpointState // by interface name; guarded by mu
	slots slotAllocator             // guarded by mu
	progs map[progKey]*sharedProg   // loaded policy programs by content; guarded by mu

	// Restart adoption, fail-closed and garbage collection (adopt.go,
	// failclosed.go, gc.go).
	pinned      map[progKey]*sharedProg // pinned by an earlier dpd, not yet claimed; guarded by mu
	stale       []*sharedProg           // pinned programs found out of date, still in some slot; guarded by mu
	applied     bool                    // the first apply after InSync has ended; guarded by mu
	knownSets   map[string]bool         // IP sets the engine replaced and did not remove; guarded by mu
	retiredKept int                     // retired program arrays still in use at the last collection; guarded by mu
	ops         Ops                     // guarded by mu
	started     time.Time               // immutable
	adopted     adoption                // what the start found; guarded by mu
	gcInterval  time.Duration           // immutable
	closed      bool                    // Close ran; guarded by mu
	// applyStarted: the first apply configured the kernel; opsBase is ops
	// at that moment. Guarded by mu.
	applyStarted bool
	opsBase      Ops

	// The programmers of routes, tunnels, masquerading and services
	// (routes.go, vtep.go, masquerade.go, services.go), each over its own
	// facilities; called under mu.
	routes  *routeProgrammer
	tunnels *tunnelProgrammer
	masq    *masqProgrammer
	svcs    *serviceProgrammer

	gcDone bool            // the post-restart garbage collection ran; guarded by mu
	logged map[string]bool // one-time warnings given; guarded by mu
}

// New checks the host, starts nothing yet, and opens the BPF side with
// default map sizes (Configure may resize before the first endpoint).
func New(opts Options) (*Kernel, error) {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if err := CheckHost(); err != nil {
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
	if opts.GCInterval <= 0 {
		opts.GCInterval = DefaultGCInterval
	}
	sizes, pinned := tcbpf.PinnedSizes(opts.PinDir)
	if !pinned {
		sizes = tcbpf.DefaultMapSizes()
	}
	k := &Kernel{
		opts:      opts,
		log:       opts.Log,
		mon:       mon,
		cfg:       cfg,
		sizes:     sizes,
		eps:       map[string]*endpointState{},
		progs:     map[progKey]*sharedProg{},
		pinned:    map[progKey]*sharedProg{},
		knownSets: map[string]bool{},
		started:   time.Now(),

		gcInterval: opts.GCInterval,
		logged:     map[string]bool{},
	}
	net := realNet(mon, cfg)
	k.tunnels = newTunnelProgrammer(net.tunnel, defaultHostname(opts.Hostname))
	k.routes = newRouteProgrammer(nil, net.routes, k.tunnels, k.logOnceLocked)
	k.tunnels.routes = k.routes
	k.masq = &masqProgrammer{net: net.masq}
	if err := k.openBPFLocked(); err != nil {
		_ = mon.Close()
		_ = cfg.Close()
		return nil, err
	}
	return k, nil
}

func (k *Kernel) openBPFLocked() error {
	d, err := tcbpf.Open(tcbpf.Options{
		PinDir:        k.opts.PinDir,
		ForceLegacyTC: k.opts.ForceLegacyTC,
		Sizes:         k.sizes,
		Log:           k.log,
	})
	if err != nil {
		return fmt.Errorf("open bpf dataplane: %w", err)
	}
	k.bpf = d
	fac := realBPF(d)
	k.routes.maps = fac.routes
	k.slots = newSlotAllocator(d.Sizes().Slots())
	k.svcs = newServiceProgrammer(fac.nat, k.log)
	if err := k.svcs.adopt(); err != nil {
		_ = d.Close()
		return fmt.Errorf("adopt service maps: %w", err)
	}
	a, err := k.adoptLocked()
	if err != nil {
		k.abandonLocked()
		_ = d.Close()
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
	k.abandonLocked()
	_ = k.mon.Close()
	_ = k.cfg.Close()
	if k.bpf != nil {
		return k.bpf.Close()
	}
	return nil
}

// BPF exposes the BPF side for Inspect (trace, counters).
func (k *Kernel) BPF() *tcbpf.Datapath {
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
	k.mon.SetPrefixes(nl.ParsePrefixes(cfg["InterfacePrefix"]))
	sizes, err := tcbpf.MapSizesFromConfig(cfg)
	if err != nil {
		return fmt.Errorf("map sizes: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.tunnels.configure(cfg); err != nil {
		return err
	}
	if !k.applied && !k.applyStarted {
		// The first apply after InSync starts here: what it costs is
		// reported against this baseline.
		k.applyStarted = true
		k.opsBase = k.ops
		k.opsBase.Netlink = k.cfg.Stats()
	}
	if sizes == k.sizes {
		return nil
	}
	if k.claimedLocked() || len(k.routes.routes) > 0 || len(k.svcs.services) > 0 {
		k.log.Warn("BPF map sizes changed; they take effect at the next restart", "want", sizes, "have", k.sizes)
		return nil
	}
	k.sizes = sizes
	k.abandonLocked()
	if err := k.bpf.Close(); err != nil {
		k.log.Warn("close bpf dataplane before resize", "err", err)
	}
	return k.openBPFLocked()
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
	k.releaseUnusedPreloadsLocked()
	if !k.applied {
		k.applied = true
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
	k.knownSets[id] = true
	k.mu.Unlock()
	return k.BPF().ReplaceIPSet(id, typ, members)
}

// UpdateIPSet implements engine.IPSetKernel.
func (k *Kernel) UpdateIPSet(id string, added, removed []model.IPSetMember) error {
	k.mu.Lock()
	k.knownSets[id] = true
	k.mu.Unlock()
	return k.BPF().UpdateIPSet(id, added, removed)
}

// RemoveIPSet implements engine.IPSetKernel.
func (k *Kernel) RemoveIPSet(id string) error {
	if err := k.BPF().RemoveIPSet(id); err != nil {
		return err
	}
	k.mu.Lock()
	delete(k.knownSets, id)
	k.mu.Unlock()
	return nil
}

// knownSetsLocked lists the IP sets the engine wants.
func (k *Kernel) knownSetsLocked() []string {
	out := make([]string, 0, len(k.knownSets))
	for id := range k.knownSets {
		out = append(out, id)
	}
	return out
}

var _ engine.Kernel = (*Kernel)(nil)
