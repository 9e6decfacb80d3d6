package linux

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	bpfdp "github.com/dpd-dev/dpd/dataplane/bpf"
	"github.com/dpd-dev/dpd/dataplane/linux/nl"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// Options configure New.
type Options struct {
	// PinDir holds dpd's pinned maps and links (default /sys/fs/bpf/dpd).
	PinDir string
	// ForceLegacyTC attaches with clsact + filters even where TCX works.
	ForceLegacyTC bool
	Log           *slog.Logger
}

// Kernel implements dataplane.Kernel on Linux. The engine calls it from one
// goroutine; Inspect may read concurrently, so state is under mu.
type Kernel struct {
	opts Options
	log  *slog.Logger
	mon  *nl.Monitor
	cfg  *nl.Configurer

	mu       sync.Mutex
	bpf      *bpfdp.Dataplane          // guarded by mu; reopened only before the first endpoint
	sizes    bpfdp.MapSizes            // guarded by mu
	eps      map[string]*endpointState // by interface name; guarded by mu
	slots    slotAllocator             // guarded by mu
	progs    map[progKey]*sharedProg   // loaded policy programs by content; guarded by mu
	routes   map[string]*model.Route   // not yet enforced (services/routes issue); guarded by mu
	services map[model.ServiceKey]*model.Service
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
	k := &Kernel{
		opts:     opts,
		log:      opts.Log,
		mon:      mon,
		cfg:      cfg,
		sizes:    bpfdp.DefaultMapSizes(),
		eps:      map[string]*endpointState{},
		progs:    map[progKey]*sharedProg{},
		routes:   map[string]*model.Route{},
		services: map[model.ServiceKey]*model.Service{},
	}
	if err := k.openBPFLocked(); err != nil {
		_ = mon.Close()
		_ = cfg.Close()
		return nil, err
	}
	return k, nil
}

func (k *Kernel) openBPFLocked() error {
	d, err := bpfdp.Open(bpfdp.Options{
		PinDir:        k.opts.PinDir,
		ForceLegacyTC: k.opts.ForceLegacyTC,
		Sizes:         k.sizes,
		Log:           k.log,
	})
	if err != nil {
		return fmt.Errorf("open bpf dataplane: %w", err)
	}
	k.bpf = d
	k.slots = newSlotAllocator(uint32(d.Sizes().Slots()))
	return nil
}

// Close releases file descriptors. Attached programs, pinned maps and
// links stay, so the next start adopts them and no packet is dropped.
func (k *Kernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.progs {
		_ = p.prog.Close()
	}
	k.progs = map[progKey]*sharedProg{}
	_ = k.mon.Close()
	_ = k.cfg.Close()
	if k.bpf != nil {
		return k.bpf.Close()
	}
	return nil
}

// BPF exposes the BPF side for Inspect (trace, counters).
func (k *Kernel) BPF() *bpfdp.Dataplane {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.bpf
}

// Configure applies the ConfigUpdate keys the kernel uses: InterfacePrefix
// and the BPF map sizes. Sizes can change only before any endpoint is
// programmed; later changes need a restart and are logged.
func (k *Kernel) Configure(cfg map[string]string) error {
	k.mon.SetPrefixes(nl.ParsePrefixes(cfg["InterfacePrefix"]))
	sizes, err := bpfdp.MapSizesFromConfig(cfg)
	if err != nil {
		return fmt.Errorf("map sizes: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if sizes == k.sizes {
		return nil
	}
	if len(k.eps) > 0 {
		k.log.Warn("BPF map sizes changed; they take effect at the next restart", "want", sizes, "have", k.sizes)
		return nil
	}
	k.sizes = sizes
	if err := k.bpf.Close(); err != nil {
		k.log.Warn("close bpf dataplane before resize", "err", err)
	}
	return k.openBPFLocked()
}

// Link reports an interface's state from the monitor's cache.
func (k *Kernel) Link(name string) model.LinkState { return k.mon.LinkState(name) }

// WatchLinks runs the interface monitor until ctx ends.
func (k *Kernel) WatchLinks(ctx context.Context, report func(model.LinkUpdate)) error {
	return k.mon.Run(ctx, report)
}

// EndApply has nothing to collect: shared programs are released as soon as
// their last endpoint moves off them.
func (k *Kernel) EndApply() error { return nil }

// ReplaceIPSet implements dataplane.IPSetKernel.
func (k *Kernel) ReplaceIPSet(id string, typ model.IPSetType, members []model.IPSetMember) error {
	return k.BPF().ReplaceIPSet(id, typ, members)
}

// UpdateIPSet implements dataplane.IPSetKernel.
func (k *Kernel) UpdateIPSet(id string, added, removed []model.IPSetMember) error {
	return k.BPF().UpdateIPSet(id, added, removed)
}

// RemoveIPSet implements dataplane.IPSetKernel.
func (k *Kernel) RemoveIPSet(id string) error { return k.BPF().RemoveIPSet(id) }
