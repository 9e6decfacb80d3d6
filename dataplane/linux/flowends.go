package linux

// Flow ends: the conntrack scanner of the current datapath deletes the
// entries idle past their timeout (the programs already ignore them) and,
// while flow events are on, reports each deleted flow entry as an end event
// with the rule that allowed the flow and what it carried each way. A TCP
// flow's FIN each way or RST marks its entry closed, which shortens its
// timeout to 10 s (30 s half-closed), so a closed connection ends within
// that plus a scan interval. dpd_conntrack never evicts; entries an older
// dpd's LRU dpd_ct evicts during an upgrade are reported by the next scan
// (flowevict.go).

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

// DefaultConntrackScan is how often expired conntrack entries are deleted
// (and their flows reported ended) when FlowOptions.ConntrackScan is 0.
const DefaultConntrackScan = 10 * time.Second

// maxEndsPerScan bounds the end events one scan reports (about 4 MiB held
// while they are handed on): a scan that expires more, after a burst of
// short flows, deletes them all and says how many went unreported.
const maxEndsPerScan = 16384

// ctScanner runs one datapath's scans. mu is held for each scan, so
// stopping waits for a scan under way without waiting for Kernel.mu,
// which the scanner takes only between scans.
type ctScanner struct {
	cancel context.CancelFunc
	mu     sync.Mutex
}

// startScanLocked starts the scanner of d; events says whether its ends
// are reported.
func (k *Kernel) startScanLocked(d *tcbpf.Datapath, events bool) {
	interval := k.opts.Flows.ConntrackScan
	if interval <= 0 {
		interval = DefaultConntrackScan
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &ctScanner{cancel: cancel}
	k.scan = s
	go k.runScan(ctx, s, d, interval, events, tcbpf.NewMonoClock())
}

// stopScanLocked stops the scanner of the datapath about to close and
// waits for a scan under way, which uses its maps.
func (k *Kernel) stopScanLocked() {
	s := k.scan
	if s == nil {
		return
	}
	k.scan = nil
	s.cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
}

func (k *Kernel) runScan(ctx context.Context, s *ctScanner, d *tcbpf.Datapath, interval time.Duration,
	events bool, clock tcbpf.MonoClock) {
	t := time.NewTicker(interval)
	defer t.Stop()
	cache := &flowCache{ifaces: map[int]string{}, rules: map[loadedProgram]map[uint64]model.RuleInfo{}}
	sc := newEndScan(events, clock)
	warnedUntracked := false
	full := ctFullWatch{d: d}
	// Every read of d's maps holds s.mu: stopping closes them.
	s.mu.Lock()
	if ctx.Err() == nil {
		full.baseline() // what an earlier dpd counted is not news
	}
	s.mu.Unlock()
	// The programs' clock learns its tick from two syncs a second or
	// more apart and publishes it with the sync after that
	// (tcbpf.Datapath.SyncClock); until then the programs call the
	// kernel's clock helper, so the calibration syncs follow each other
	// closely, a bounded number of times, and then each scan syncs.
	calibrate := time.NewTimer(clockCalibration)
	defer calibrate.Stop()
	calibrations := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-calibrate.C:
			s.mu.Lock()
			done := true
			if ctx.Err() == nil {
				k.syncClock(d)
				done = clockPublished(d)
			}
			s.mu.Unlock()
			if calibrations++; !done && calibrations < maxClockCalibrations {
				calibrate.Reset(clockRecalibration)
			}
			continue
		case <-t.C:
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			return
		}
		k.syncClock(d)
		n, err := sc.scan(d, time.Now())
		refused, ferr := full.check()
		s.mu.Unlock()
		if err != nil {
			k.log.Warn("conntrack scan failed", "err", err)
		} else if n > 0 {
			k.log.Debug("conntrack entries expired", "count", n)
		}
		if ferr != nil {
			k.log.Warn("conntrack scan: read the conntrack-full drops", "err", ferr)
		} else if refused > 0 {
			k.log.Warn("conntrack full: new flows refused since the last scan; raise "+tcbpf.ConfigConntrack,
				"refused", refused, "capacity", d.Maps().Conntrack.MaxEntries())
		}
		if sc.tr.untracked > 0 && !warnedUntracked {
			warnedUntracked = true
			k.log.Warn("conntrack scan: more flows than it follows for eviction; the eviction of the rest goes unreported",
				"followed", maxTrackedFlows, "untracked", sc.tr.untracked)
		}
		if sc.unreported > 0 {
			k.log.Warn("conntrack scan: more flows ended than one scan reports; the rest are not reported",
				"reported", len(sc.ends), "unreported", sc.unreported)
		}
		k.mu.Lock()
		fw := k.flows
		if !k.closed && fw != nil {
			fw.untracked.Store(int64(sc.tr.untracked))
			for i := range sc.ends {
				k.resolveFlowLocked(&sc.ends[i], cache)
			}
		}
		k.mu.Unlock()
		if fw == nil || len(sc.ends) == 0 {
			continue
		}
		fw.ended.Add(uint64(len(sc.ends)))
		fw.evicted.Add(uint64(sc.evicted))
		for i := range sc.ends {
			fw.hist.Add(sc.ends[i])
		}
	}
}

// clockCalibration is when, after the scanner starts, the programs'
// clock is synced a second time: over a span long enough to learn the
// tick. Until the tick is published the syncs repeat every
// clockRecalibration, at most maxClockCalibrations times in all (a kernel
// whose HZ fits none is left to the scans).
const (
	clockCalibration     = 1100 * time.Millisecond
	clockRecalibration   = 100 * time.Millisecond
	maxClockCalibrations = 30
)

// syncClock moves the programs' clock onto the coarse clock the scan
// compares it with; a failure leaves the last calibration in use.
func (k *Kernel) syncClock(d *tcbpf.Datapath) {
	if err := d.SyncClock(); err != nil {
		k.log.Warn("sync the programs' clock", "err", err)
	}
}

// clockPublished reports whether the programs read the calibrated clock
// (its tick is published); a failed read counts as not yet.
func clockPublished(d *tcbpf.Datapath) bool {
	c, err := d.Clock()
	return err == nil && c.TickNs != 0
}

// ctScanSource is the datapath as the scan uses it.
type ctScanSource interface {
	ScanConntrackFlows(now time.Time, ended, live func(*tcbpf.CTKey, *tcbpf.CTVal)) (int, error)
}

// endScan is one scanner's state across scans: the flows it follows for
// eviction and the last scan's end events (not yet named).
type endScan struct {
	events     bool
	clock      tcbpf.MonoClock
	tr         *flowTracker
	ends       []model.FlowEvent
	unreported int // ends beyond maxEndsPerScan in the last scan
	evicted    int // of ends, the evicted ones
}

func newEndScan(events bool, clock tcbpf.MonoClock) *endScan {
	return &endScan{events: events, clock: clock, tr: newFlowTracker(maxTrackedFlows)}
}

// scan deletes the expired entries and, with events, collects the ends
// of the flows expired and evicted since the last scan into sc.ends.
func (sc *endScan) scan(d ctScanSource, now time.Time) (expired int, err error) {
	sc.ends, sc.unreported, sc.evicted = sc.ends[:0], 0, 0
	if !sc.events {
		return d.ScanConntrackFlows(now, nil, nil)
	}
	add := func(key *tcbpf.CTKey, v *tcbpf.CTVal, why model.FlowEndReason) {
		if len(sc.ends) == maxEndsPerScan {
			sc.unreported++
			return
		}
		ev := flowEnd(key, v, now, sc.clock)
		ev.EndReason = why
		if why == model.FlowEndEvicted {
			sc.evicted++
		}
		sc.ends = append(sc.ends, ev)
	}
	evict := func(key *tcbpf.CTKey, v *tcbpf.CTVal) { add(key, v, model.FlowEndEvicted) }
	sc.tr.begin()
	expired, err = d.ScanConntrackFlows(now,
		func(key *tcbpf.CTKey, v *tcbpf.CTVal) {
			sc.tr.expired(key)
			add(key, v, model.FlowEndExpired)
		},
		func(key *tcbpf.CTKey, v *tcbpf.CTVal) { sc.tr.live(key, v, evict) })
	if err != nil {
		sc.tr.abort() // what the scan did not see may still be there
		return expired, err
	}
	sc.tr.end(evict)
	return expired, nil
}

// flowEnd is the end event of a deleted conntrack entry.
func flowEnd(key *tcbpf.CTKey, v *tcbpf.CTVal, now time.Time, clock tcbpf.MonoClock) model.FlowEvent {
	v6 := key.Family == abi.CTFamilyV6
	f := tcbpf.FlowOf(key, v)
	src, dst := ctAddr(f.Saddr, v6), ctAddr(f.Daddr, v6)
	ev := model.FlowEvent{
		Time:      now,
		Started:   clock.Time(v.Created),
		Ifindex:   int(key.Ifindex),
		Direction: model.Direction(f.Dir & 1), // model.Egress == abi.DirFromWEP
		Proto:     key.Proto,
		Src:       netip.AddrPortFrom(src, f.Sport),
		Dst:       netip.AddrPortFrom(dst, f.Dport),
		Stage:     model.TraceDecided,
		Allowed:   true,
		RuleID:    v.RuleId,
		End:       true,
		Forward:   model.FlowCounts{Packets: v.PktsFwd, Bytes: v.BytesFwd},
		Reply:     model.FlowCounts{Packets: v.PktsRev, Bytes: v.BytesRev},
	}
	if v.Flags&abi.CTFNATFwd != 0 {
		ev.Frontend = netip.AddrPortFrom(ctAddr(v.NatAddr, v6), v.NatPort)
	}
	return ev
}

// ctAddr reads a conntrack address of the key's family: IPv4 is the
// first 4 bytes. A NAT frontend has its flow's family (a service port
// never mixes families).
func ctAddr(b [16]byte, v6 bool) netip.Addr {
	if v6 {
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte(b[:4]))
}

// ctFullWatch warns when new flows were refused for want of conntrack
// room since it last looked: the operator's cue to raise the map's size.
type ctFullWatch struct {
	d    *tcbpf.Datapath
	seen uint64
	read bool
}

// baseline records the count so far; a failed read leaves it to the
// first check.
func (w *ctFullWatch) baseline() {
	if n, _, err := w.d.ReadDrops(tcbpf.DropCTFull); err == nil {
		w.seen, w.read = n, true
	}
}

// check says how many new flows were refused since the last look.
func (w *ctFullWatch) check() (uint64, error) {
	n, _, err := w.d.ReadDrops(tcbpf.DropCTFull)
	if err != nil {
		return 0, err
	}
	var refused uint64
	if w.read && n > w.seen {
		refused = n - w.seen
	}
	w.seen, w.read = n, true
	return refused, nil
}
