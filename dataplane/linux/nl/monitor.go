package nl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/dpd-dev/dpd/dataplane/model"
)

// DefaultResyncInterval is how often the monitor re-lists every link to
// repair events the subscription missed (e.g. on socket overflow).
const DefaultResyncInterval = 30 * time.Second

const (
	// updateBuffer lets decoded link events queue between the library's
	// reader and Run's goroutine, e.g. while Run re-lists every link.
	updateBuffer = 1024
	// receiveBuffer is the subscription's socket buffer, a few thousand link
	// messages (each costs its skb's size, 2-4 KiB), so a burst (deleting
	// 1,000 veth pairs is 2,000 events within a second) fits while Run's
	// goroutine catches up. Set with SO_RCVBUFFORCE, which needs
	// CAP_NET_ADMIN (dpd runs as root), because SO_RCVBUF is capped at
	// net.core.rmem_max (208 KiB by default).
	receiveBuffer = 8 << 20
	minBackoff    = 100 * time.Millisecond
	maxBackoff    = 10 * time.Second
	// dumpRetries bounds re-listing when the kernel flags a dump interrupted.
	dumpRetries = 5
	// resyncRetry is how soon a failed or incomplete resync is repeated.
	resyncRetry = time.Second
)

// MonitorConfig configures a Monitor. Zero values take the defaults.
type MonitorConfig struct {
	// Prefixes are the workload interface prefixes; default ["cali"].
	Prefixes []string
	// ResyncInterval is the period of the full re-list; default 30 s.
	ResyncInterval time.Duration
	// Logger receives subscription trouble; default slog.Default().
	Logger *slog.Logger
}

// MonitorStats counts what the monitor did, for tests and metrics.
type MonitorStats struct {
	Events  uint64 // link messages received from the subscription
	Resyncs uint64 // completed full re-lists
	// PartialResyncs counts re-lists the kernel kept flagging interrupted:
	// applied without removals, and retried soon.
	PartialResyncs uint64
	ResyncRepairs  uint64 // cache entries a re-list had to add, fix or drop
	Resubscribes   uint64 // subscriptions re-opened after they broke
	Reports        uint64 // model.LinkUpdates handed to the report callback
}

type linkEntry struct {
	index int
	state model.LinkState
}

// Monitor tracks links and reports workload interface changes. LinkState,
// Ifindex, SetPrefixes and Stats are safe to call from any goroutine; Run is
// called once at a time.
type Monitor struct {
	handle         *netlink.Handle
	resyncInterval time.Duration
	log            *slog.Logger
	// rcvbuf is the subscription's socket buffer size, receiveBuffer
	// (tests shrink it), forced past rmem_max if forceRcvbuf (probed once
	// in NewMonitor).
	rcvbuf      int
	forceRcvbuf bool
	// ns, when set, is the namespace to subscribe in (tests; the handle is
	// bound to the namespace it was opened in). Nil: the current one.
	ns *netns.NsHandle

	running atomic.Bool // Run is active
	synced  atomic.Bool // the cache is filled and maintained; LinkState trusts it

	// prefixCh (capacity 1) wakes Run after SetPrefixes so it reports the
	// links that newly match.
	prefixCh chan struct{}

	mu           sync.RWMutex
	prefixes     []string             // guarded by mu
	linksLocked  map[string]linkEntry // name -> entry; guarded by mu
	namesByIndex map[int]string       // ifindex -> name, to see renames; guarded by mu

	// reported is the last state and ifindex reported per matching name
	// (absent names are not kept). Only Run's goroutine touches it.
	reported map[string]linkEntry
	// queue takes reports to the callback's goroutine; set by Run, used by
	// Run's goroutine only.
	queue *reportQueue

	events, resyncs, partials, repairs, resubscribes, reports atomic.Uint64
}

// NewMonitor opens the monitor's netlink handle. Call Run to start watching
// and Close when done.
func NewMonitor(cfg MonitorConfig) (*Monitor, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink handle: %w", err)
	}
	m := &Monitor{
		handle:         h,
		resyncInterval: cfg.ResyncInterval,
		log:            cfg.Logger,
		prefixCh:       make(chan struct{}, 1),
		prefixes:       cleanPrefixes(cfg.Prefixes),
		linksLocked:    map[string]linkEntry{},
		namesByIndex:   map[int]string{},
	}
	if m.resyncInterval <= 0 {
		m.resyncInterval = DefaultResyncInterval
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.rcvbuf, m.forceRcvbuf = receiveBuffer, canForceRcvbuf()
	if !m.forceRcvbuf {
		m.log.Info("link monitor: cannot force the netlink receive buffer; capped at net.core.rmem_max")
	}
	return m, nil
}

// canForceRcvbuf tries SO_RCVBUFFORCE on a throwaway netlink socket. Asking
// the library for it and failing would leak the subscription's socket.
func canForceRcvbuf() bool {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return false
	}
	defer func() { _ = unix.Close(fd) }()
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, receiveBuffer) == nil
}

// Close releases the netlink handle. Stop Run (cancel its context) first.
func (m *Monitor) Close() error {
	m.handle.Close()
	return nil
}

// SetPrefixes replaces the workload interface prefixes (ConfigUpdate's
// InterfacePrefix, already split; see ParsePrefixes). A running monitor then
// reports the current state of every link that newly matches. Links that no
// longer match get no report: they still exist, they just stop being ours.
func (m *Monitor) SetPrefixes(prefixes []string) {
	p := cleanPrefixes(prefixes)
	m.mu.Lock()
	m.prefixes = p
	m.mu.Unlock()
	select {
	case m.prefixCh <- struct{}{}:
	default:
	}
}

// Prefixes returns the current workload interface prefixes.
func (m *Monitor) Prefixes() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]string(nil), m.prefixes...)
}

// Matches reports whether name is a workload interface under the current
// prefixes.
func (m *Monitor) Matches(name string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return matchesAny(m.prefixes, name)
}

// LinkState reports the state of any named link (matching or not): from the
// cache while Run is active, else by asking the kernel directly.
func (m *Monitor) LinkState(name string) model.LinkState {
	if m.synced.Load() {
		m.mu.RLock()
		defer m.mu.RUnlock()
		e, ok := m.linksLocked[name]
		if !ok {
			return model.LinkAbsent
		}
		return e.state
	}
	l, err := m.handle.LinkByName(name)
	if err != nil {
		return model.LinkAbsent
	}
	return stateOf(l.Attrs())
}

// Ifindex returns the interface index of a named link, from the cache while
// Run is active, else from the kernel. ok is false when the link is absent.
func (m *Monitor) Ifindex(name string) (index int, ok bool) {
	if m.synced.Load() {
		m.mu.RLock()
		defer m.mu.RUnlock()
		e, ok := m.linksLocked[name]
		return e.index, ok
	}
	l, err := m.handle.LinkByName(name)
	if err != nil {
		return 0, false
	}
	return l.Attrs().Index, true
}

// Stats returns a snapshot of the monitor's counters.
func (m *Monitor) Stats() MonitorStats {
	return MonitorStats{
		Events:         m.events.Load(),
		Resyncs:        m.resyncs.Load(),
		PartialResyncs: m.partials.Load(),
		ResyncRepairs:  m.repairs.Load(),
		Resubscribes:   m.resubscribes.Load(),
		Reports:        m.reports.Load(),
	}
}

// Run watches links until ctx ends, calling report whenever a matching
// interface appears, changes state (or ifindex) or disappears. report is
// called from one goroutine Run starts, never under a lock, and may block:
// the cache keeps following link events meanwhile, and reports report has
// not taken yet are coalesced to the latest state per name (see
// reportQueue). The first report for each existing matching interface
// comes from the initial listing. Run returns nil when ctx ends (after
// report has returned for the last time), or an error if the very first
// subscription fails; later failures are retried with backoff, each
// followed by a full resync.
func (m *Monitor) Run(ctx context.Context, report func(model.LinkUpdate)) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("link monitor already running")
	}
	defer func() {
		m.synced.Store(false)
		m.running.Store(false)
	}()
	// A new Run has a new consumer, which must hear about every link again.
	m.reported = map[string]linkEntry{}
	q := newReportQueue()
	m.queue = q
	dctx, stop := context.WithCancel(ctx)
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		q.run(dctx, func(u model.LinkUpdate) {
			m.reports.Add(1)
			report(u)
		})
	}()
	defer func() {
		stop()
		<-delivered
	}()

	backoff := minBackoff
	for first := true; ; first = false {
		started := time.Now()
		err := m.serve(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if first && !m.synced.Load() {
			return err
		}
		m.synced.Store(false)
		if time.Since(started) > maxBackoff {
			backoff = minBackoff
		}
		m.resubscribes.Add(1)
		m.log.Warn("link monitor: resubscribing", "err", err, "after", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// serve runs one subscription: subscribe, full resync, then events and
// periodic resyncs until ctx ends or the subscription breaks.
func (m *Monitor) serve(ctx context.Context) error {
	updates := make(chan netlink.LinkUpdate, updateBuffer)
	done := make(chan struct{})
	errs := make(chan error, 16)
	opts := netlink.LinkSubscribeOptions{
		Namespace:              m.ns,
		ListExisting:           true,
		ReceiveBufferSize:      m.rcvbuf,
		ReceiveBufferForceSize: m.forceRcvbuf,
		ErrorCallback: func(err error) {
			select {
			case errs <- err:
			default: // a resync is coming anyway
			}
		},
	}
	if err := netlink.LinkSubscribeWithOptions(updates, done, opts); err != nil {
		return fmt.Errorf("subscribe to links: %w", err)
	}
	defer func() {
		close(done)
		// The library's reader sends without watching done; drain until it
		// sees the closed socket and closes updates, so it cannot leak.
		go func() {
			for range updates {
			}
		}()
	}()

	// ListExisting only adds; a full list also catches links deleted while
	// we were not subscribed.
	complete, err := m.resync()
	if err != nil {
		return err
	}
	m.synced.Store(true)
	// retry fires when a failed or incomplete resync is due again.
	var retry <-chan time.Time
	if !complete {
		retry = time.After(resyncRetry)
	}

	ticker := time.NewTicker(m.resyncInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case u, ok := <-updates:
			if !ok {
				if lastErr == nil {
					lastErr = errors.New("closed")
				}
				return fmt.Errorf("link subscription ended: %w", lastErr)
			}
			m.events.Add(1)
			m.queue.push(m.applyUpdate(u))
		case err := <-errs:
			lastErr = err
			if errors.Is(err, netlink.ErrDumpInterrupted) {
				retry = m.resyncOrRetry()
			}
		case <-ticker.C:
			retry = m.resyncOrRetry()
		case <-retry:
			retry = m.resyncOrRetry()
		case <-m.prefixCh:
			m.queue.push(m.pendingAll())
		}
	}
}

// resyncOrRetry resyncs and returns when to try again: soon if the resync
// failed or was incomplete, else never (nil; the ticker goes on).
func (m *Monitor) resyncOrRetry() <-chan time.Time {
	complete, err := m.resync()
	switch {
	case err != nil:
		m.log.Warn("link monitor: resync failed", "err", err, "retry", resyncRetry)
	case !complete:
		m.log.Info("link monitor: link dumps kept being interrupted; applied what they listed",
			"retry", resyncRetry)
	default:
		return nil
	}
	return time.After(resyncRetry)
}

// retryDump runs dump until the kernel does not flag it interrupted (links,
// routes or neighbours changed meanwhile), at most dumpRetries times. A
// dump still interrupted after them is an error, never taken as complete:
// removals are decided from these listings.
func retryDump[T any](dump func() (T, error)) (T, error) {
	var zero T
	var err error
	for range dumpRetries {
		var out T
		if out, err = dump(); err == nil {
			return out, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return zero, err
}
