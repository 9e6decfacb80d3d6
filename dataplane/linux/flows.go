package linux

// engine.FlowObserver: the programs' flow events (dpd_events) read by one
// goroutine per opened datapath, translated into model.FlowEvent with the
// interface and the deciding rule as the kernel knows them when the event
// is read, and kept in a bounded history that any number of Inspect
// subscribers follow.

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/flowhist"
	"github.com/dpd-dev/dpd/dataplane/model"
	"github.com/dpd-dev/dpd/dataplane/tcbpf"
	"github.com/dpd-dev/dpd/dataplane/tcbpf/abi"
)

var _ engine.FlowObserver = (*Kernel)(nil)

// FlowOptions configure flow events.
type FlowOptions struct {
	// Off leaves the programs' flow events switched off (they then cost
	// the policy path one array lookup).
	Off bool
	// History is how many events are kept for Observe (default
	// flowhist.DefaultCapacity).
	History int
	// DenyInterval is how often a denied flow is reported at most; the
	// packets in between are counted into its next event (default
	// tcbpf.DefaultDenyInterval).
	DenyInterval time.Duration
	// StagedPreview runs, for endpoint directions with staged policies
	// (the engine's Options.StagedPreview resolves them), a preview
	// program on every packet the policy decides and reports its verdict
	// and rule beside the real one. It costs a decided packet a second
	// policy evaluation; packets without a preview pay a failed tail call.
	StagedPreview bool
	// ConntrackScan is how often expired conntrack entries are deleted
	// and, with events on, reported as flow ends (default
	// DefaultConntrackScan).
	ConntrackScan time.Duration
}

// flowWatcher owns the history and the reader of the current datapath.
type flowWatcher struct {
	hist   *flowhist.History
	read   atomic.Uint64
	ended  atomic.Uint64 // end events of expired and evicted conntrack entries (flowends.go)
	errs   atomic.Uint64
	drops  func() (uint64, error) // the current datapath's drop counter; guarded by Kernel.mu
	reader *tcbpf.EventReader     // guarded by Kernel.mu

	// evicted counts the ends of evicted entries; untracked is the last
	// scan's flows beyond what it follows (flowevict.go).
	evicted   atomic.Uint64
	untracked atomic.Int64
}

// flowCache speeds up translation; used by the reader goroutine only.
type flowCache struct {
	ifaces map[int]string                              // ifindex -> interface, checked on use
	rules  map[loadedProgram]map[uint64]model.RuleInfo // counter tables by program
}

// maxCachedPrograms bounds flowCache.rules; past it the cache starts over.
const maxCachedPrograms = 256

// startFlowsLocked switches d's events on and starts reading them. A
// failure costs the events, never the dataplane: it is logged.
func (k *Kernel) startFlowsLocked(d *tcbpf.Datapath) {
	o := k.opts.Flows
	if k.flows == nil {
		k.flows = &flowWatcher{hist: flowhist.New(o.History)}
	}
	interval := o.DenyInterval
	if interval <= 0 {
		interval = tcbpf.DefaultDenyInterval
	}
	if err := d.SetEventsPreview(!o.Off, interval, o.StagedPreview); err != nil {
		k.log.Warn("flow events unavailable", "err", err)
		return
	}
	if o.Off {
		return
	}
	r, err := d.NewEventReader()
	if err != nil {
		k.log.Warn("flow events unavailable", "err", err)
		return
	}
	k.flows.reader, k.flows.drops = r, d.EventDrops
	go k.readFlows(r, tcbpf.NewMonoClock())
}

// stopFlowsLocked ends the reader of the datapath about to close. It does
// not wait for the goroutine, which may be waiting for mu.
func (k *Kernel) stopFlowsLocked() {
	if k.flows == nil || k.flows.reader == nil {
		return
	}
	_ = k.flows.reader.Close()
	k.flows.reader, k.flows.drops = nil, nil
}

func (k *Kernel) readFlows(r *tcbpf.EventReader, clock tcbpf.MonoClock) {
	cache := &flowCache{ifaces: map[int]string{}, rules: map[loadedProgram]map[uint64]model.RuleInfo{}}
	fw := k.flows
	for {
		raw, err := r.Read()
		if errors.Is(err, tcbpf.ErrEventsClosed) {
			return
		}
		if err != nil {
			if fw.errs.Add(1) == 1 {
				k.log.Warn("reading flow events", "err", err)
			}
			continue
		}
		fw.read.Add(1)
		ev := flowEvent(&raw, clock)
		k.mu.Lock()
		if !k.closed {
			k.resolveFlowLocked(&ev, cache)
		}
		k.mu.Unlock()
		fw.hist.Add(ev)
	}
}

// flowEvent is the kernel-independent part of a raw event.
func flowEvent(raw *tcbpf.FlowEvent, clock tcbpf.MonoClock) model.FlowEvent {
	v6 := raw.Family == 6
	src, dst := ctAddr(raw.Saddr, v6), ctAddr(raw.Daddr, v6)
	ev := model.FlowEvent{
		Time:       clock.Time(raw.TsNs),
		Ifindex:    int(raw.Ifindex),
		Direction:  model.Direction(raw.Dir & 1), // model.Egress == abi.DirFromWEP
		Proto:      raw.Proto,
		Src:        netip.AddrPortFrom(src, raw.Sport),
		Dst:        netip.AddrPortFrom(dst, raw.Dport),
		ICMPType:   raw.IcmpType,
		ICMPCode:   raw.IcmpCode,
		Stage:      model.TraceDecided,
		Allowed:    raw.Verdict == abi.VerdictAllow,
		RuleID:     raw.RuleId,
		Suppressed: raw.Suppressed,
	}
	if raw.Kind == abi.EvNoPolicy {
		ev.Stage = model.TraceNoPolicy
	}
	if raw.PreviewVerdict != abi.VerdictNone {
		ev.Staged, ev.StagedAllowed, ev.StagedRuleID = true, raw.PreviewVerdict == abi.VerdictAllow, raw.PreviewRuleId
	}
	if raw.Flags&abi.StNAT != 0 {
		ev.Frontend = netip.AddrPortFrom(ctAddr(raw.NatAddr, v6), raw.NatPort)
	}
	return ev
}

// resolveFlowLocked names the interface and the deciding rule with what
// is installed now.
func (k *Kernel) resolveFlowLocked(ev *model.FlowEvent, c *flowCache) {
	if k.eps == nil {
		return
	}
	name, ok := c.ifaces[ev.Ifindex]
	if st := k.eps.eps[name]; !ok || st == nil || st.ifindex != ev.Ifindex {
		name = ""
		for n, st := range k.eps.eps {
			if st.ifindex == ev.Ifindex {
				name = n
				break
			}
		}
		if name == "" {
			delete(c.ifaces, ev.Ifindex)
			return
		}
		c.ifaces[ev.Ifindex] = name
	}
	ev.Iface = name
	if ev.RuleID != 0 {
		if prog := k.installedLocked(name, ev.Direction); prog != nil {
			ev.Rule, ev.RuleFound = c.table(prog)[ev.RuleID]
		}
	}
	if ev.Staged && ev.StagedRuleID != 0 && k.preview != nil {
		if prog := k.preview.program(name, ev.Direction); prog != nil {
			ev.StagedRule, ev.StagedRuleFound = c.table(prog)[ev.StagedRuleID]
		}
	}
}

// table is prog's rules by counter id.
func (c *flowCache) table(prog loadedProgram) map[uint64]model.RuleInfo {
	table, ok := c.rules[prog]
	if !ok {
		if len(c.rules) >= maxCachedPrograms {
			clear(c.rules)
		}
		rules := prog.Rules()
		table = make(map[uint64]model.RuleInfo, len(rules))
		for i := range rules {
			table[rules[i].CounterID] = rules[i]
		}
		c.rules[prog] = table
	}
	return table
}

// ObserveFlows implements engine.FlowObserver.
func (k *Kernel) ObserveFlows(since time.Time, last int, follow bool, buffer int) ([]model.FlowEvent, engine.FlowSubscription) {
	k.mu.Lock()
	fw := k.flows
	k.mu.Unlock()
	if fw == nil {
		return nil, nil
	}
	if !follow {
		return fw.hist.Since(since, last), nil
	}
	backlog, sub := fw.hist.Subscribe(since, last, buffer)
	return backlog, sub
}

// FlowStats implements engine.FlowObserver.
func (k *Kernel) FlowStats() model.FlowStats {
	k.mu.Lock()
	fw := k.flows
	var drops uint64
	if fw != nil && fw.drops != nil {
		drops, _ = fw.drops() // a stat: an unreadable counter reads as 0
	}
	k.mu.Unlock()
	if fw == nil {
		return model.FlowStats{}
	}
	held, capacity, subs, lost := fw.hist.Stats()
	return model.FlowStats{
		Read: fw.read.Load(), Ended: fw.ended.Load(), Evicted: fw.evicted.Load(), Untracked: int(fw.untracked.Load()),
		KernelDrops: drops, ReadErrors: fw.errs.Load(),
		History: held, HistoryCap: capacity, Subscribers: subs, SubscriberLost: lost,
	}
}
