package linux

// Flow ends: the conntrack scanner of the current datapath deletes the
// entries idle past their timeout (the programs already ignore them) and,
// while flow events are on, reports each deleted flow entry as an end event
// with the rule that allowed the flow and what it carried each way. A TCP
// flow's FIN or RST marks its entry closing, which shortens its timeout to
// 30 s, so a closed connection ends within that plus a scan interval.
// Entries the LRU map evicts when full end unreported.

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
	var ends []model.FlowEvent
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ends = ends[:0]
		unreported := 0
		var record func(*tcbpf.CTKey, *tcbpf.CTVal)
		if events {
			now := time.Now()
			record = func(key *tcbpf.CTKey, v *tcbpf.CTVal) {
				if len(ends) == maxEndsPerScan {
					unreported++
					return
				}
				ends = append(ends, flowEnd(key, v, now, clock))
			}
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			return
		}
		n, err := d.ScanConntrackEnded(time.Now(), record)
		s.mu.Unlock()
		if err != nil {
			k.log.Warn("conntrack scan failed", "err", err)
		} else if n > 0 {
			k.log.Debug("conntrack entries expired", "count", n)
		}
		if unreported > 0 {
			k.log.Warn("conntrack scan: more flows ended than one scan reports; the rest are not reported",
				"reported", len(ends), "unreported", unreported)
		}
		if len(ends) == 0 {
			continue
		}
		k.mu.Lock()
		fw := k.flows
		if !k.closed {
			for i := range ends {
				k.resolveFlowLocked(&ends[i], cache)
			}
		}
		k.mu.Unlock()
		if fw == nil {
			continue
		}
		fw.ended.Add(uint64(len(ends)))
		for i := range ends {
			fw.hist.Add(ends[i])
		}
	}
}

// flowEnd is the end event of a deleted conntrack entry.
func flowEnd(key *tcbpf.CTKey, v *tcbpf.CTVal, now time.Time, clock tcbpf.MonoClock) model.FlowEvent {
	v6 := key.Family == abi.CTFamilyV6
	src, dst := ctAddr(key.Saddr, v6), ctAddr(key.Daddr, v6)
	ev := model.FlowEvent{
		Time:      now,
		Started:   clock.Time(v.Created),
		Ifindex:   int(key.Ifindex),
		Direction: model.Direction(key.Dir & 1), // model.Egress == abi.DirFromWEP
		Proto:     key.Proto,
		Src:       netip.AddrPortFrom(src, key.Sport),
		Dst:       netip.AddrPortFrom(dst, key.Dport),
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
