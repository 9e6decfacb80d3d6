package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpd-dev/dpd/client/flowfmt"
	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
)

// Flow logs and flow metrics: one subscriber to the kernel's flow events
// that counts flows per policy for Prometheus and, when a flow log is
// configured, aggregates them per interval (source and destination
// endpoint, destination port, protocol, action, deciding rule) into JSON
// lines, the shape of Calico's flow logs.

const (
	// DefaultFlowLogInterval is the aggregation interval of --flow-log.
	DefaultFlowLogInterval = time.Minute
	// maxFlowPolicySeries bounds dpd_flows_total's label sets; flows of
	// further policies count under policy "_other".
	maxFlowPolicySeries = 500
	// maxFlowLogKeys bounds one interval's aggregates; further keys are
	// counted in the interval's "overflow" line.
	maxFlowLogKeys = 100000
	flowAggBuffer  = 4096
)

// flowPolicyKey labels dpd_flows_total.
type flowPolicyKey struct{ verdict, tier, policy string }

// flowLogKey is one aggregate of a flow log interval.
type flowLogKey struct {
	src, dst string // endpoint id, or the address when not local
	dstPort  uint16
	proto    uint8
	action   string
	rule     string
}

// FlowLogRecord is one line of the flow log.
type FlowLogRecord struct {
	StartTime  time.Time `json:"start_time"`
	EndTime    time.Time `json:"end_time"`
	Source     string    `json:"source"`
	Dest       string    `json:"dest"`
	DestPort   uint16    `json:"dest_port"`
	Proto      string    `json:"proto"`
	Action     string    `json:"action"`
	Policy     string    `json:"policy"`
	NumFlows   uint64    `json:"num_flows"`
	NumPackets uint64    `json:"num_packets"` // the packets the events stand for: a new flow's first, plus the denied ones counted while rate-limited
	// Flows of the key that ended in the interval (their conntrack entries
	// expired) and what they carried in total: out is source to
	// destination, in the replies.
	NumFlowsCompleted uint64 `json:"num_flows_completed"`
	PacketsOut        uint64 `json:"packets_out"`
	BytesOut          uint64 `json:"bytes_out"`
	PacketsIn         uint64 `json:"packets_in"`
	BytesIn           uint64 `json:"bytes_in"`
	Overflow          bool   `json:"overflow,omitempty"`
	// Of the flows completed, those whose entries the full conntrack
	// table evicted: their totals are as the scan before saw them.
	NumFlowsEvicted uint64 `json:"num_flows_evicted,omitempty"`
}

// count adds ev to r: a decision counts a flow and the packets it stands
// for, an end the completed flow and its totals.
func (r *FlowLogRecord) count(ev *model.FlowEvent) {
	if ev.End {
		r.NumFlowsCompleted++
		if ev.EndReason == model.FlowEndEvicted {
			r.NumFlowsEvicted++
		}
		r.PacketsOut += ev.Forward.Packets
		r.BytesOut += ev.Forward.Bytes
		r.PacketsIn += ev.Reply.Packets
		r.BytesIn += ev.Reply.Bytes
		return
	}
	r.NumFlows++
	r.NumPackets += 1 + uint64(ev.Suppressed)
}

type flowAggregator struct {
	fo       engine.FlowObserver
	eng      Engine
	out      io.Writer // nil: no flow log
	interval time.Duration
	log      *slog.Logger

	mu        sync.Mutex
	byPolicy  map[flowPolicyKey]uint64 // guarded by mu
	window    map[flowLogKey]*FlowLogRecord
	overflow  FlowLogRecord
	winStart  time.Time
	peers     *peerIndex // used by run's goroutine only
	eventsD   *prometheus.Desc
	droppedD  *prometheus.Desc
	lostD     *prometheus.Desc
	subsD     *prometheus.Desc
	flowsD    *prometheus.Desc
	historyD  *prometheus.Desc
	decodeErr *prometheus.Desc
	endsD     *prometheus.Desc
	evictedD  *prometheus.Desc
	untrackD  *prometheus.Desc
}

func newFlowAggregator(fo engine.FlowObserver, eng Engine, out io.Writer, interval time.Duration, log *slog.Logger) *flowAggregator {
	if interval <= 0 {
		interval = DefaultFlowLogInterval
	}
	return &flowAggregator{
		fo: fo, eng: eng, out: out, interval: interval, log: log,
		byPolicy: map[flowPolicyKey]uint64{}, window: map[flowLogKey]*FlowLogRecord{},
		peers: &peerIndex{eng: eng},
		eventsD: prometheus.NewDesc("dpd_flow_events_total",
			"Flow events read from the dataplane's ring buffer.", nil, nil),
		droppedD: prometheus.NewDesc("dpd_flow_events_dropped_total",
			"Flow events the dataplane could not write because its ring buffer was full (the packets were not affected).", nil, nil),
		lostD: prometheus.NewDesc("dpd_flow_events_lost_total",
			"Flow events slow Observe subscribers (and the flow log) missed.", nil, nil),
		subsD: prometheus.NewDesc("dpd_flow_event_subscribers",
			"Subscribers following flow events (Observe streams and the flow log).", nil, nil),
		historyD: prometheus.NewDesc("dpd_flow_event_history",
			"Flow events held in the in-memory history Observe answers from.", nil, nil),
		decodeErr: prometheus.NewDesc("dpd_flow_event_read_errors_total",
			"Flow event records that could not be read.", nil, nil),
		endsD: prometheus.NewDesc("dpd_flow_ends_total",
			"Allowed flows reported ended: conntrack entries the scanner expired, or an older dpd's full LRU conntrack evicted during an upgrade (dpd_flow_ends_evicted_total).", nil, nil),
		evictedD: prometheus.NewDesc("dpd_flow_ends_evicted_total",
			"Allowed flows reported ended because an older dpd's full LRU conntrack evicted their entries during an upgrade (dpd's own conntrack refuses new flows instead).", nil, nil),
		untrackD: prometheus.NewDesc("dpd_flow_ends_untracked",
			"Flows the last conntrack scan could not follow for eviction (beyond its cap): their eviction goes unreported.", nil, nil),
		flowsD: prometheus.NewDesc("dpd_flows_total",
			"New flows decided, by verdict and deciding policy (denied flows at most once per flow per second); at most 500 policies, the rest as policy \"_other\".",
			[]string{"verdict", "tier", "policy"}, nil),
	}
}

func (a *flowAggregator) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{a.eventsD, a.droppedD, a.lostD, a.subsD, a.historyD, a.decodeErr, a.flowsD, a.endsD, a.evictedD, a.untrackD} {
		ch <- d
	}
}

func (a *flowAggregator) Collect(ch chan<- prometheus.Metric) {
	st := a.fo.FlowStats()
	ch <- prometheus.MustNewConstMetric(a.eventsD, prometheus.CounterValue, float64(st.Read))
	ch <- prometheus.MustNewConstMetric(a.droppedD, prometheus.CounterValue, float64(st.KernelDrops))
	ch <- prometheus.MustNewConstMetric(a.lostD, prometheus.CounterValue, float64(st.SubscriberLost))
	ch <- prometheus.MustNewConstMetric(a.subsD, prometheus.GaugeValue, float64(st.Subscribers))
	ch <- prometheus.MustNewConstMetric(a.historyD, prometheus.GaugeValue, float64(st.History))
	ch <- prometheus.MustNewConstMetric(a.decodeErr, prometheus.CounterValue, float64(st.ReadErrors))
	ch <- prometheus.MustNewConstMetric(a.endsD, prometheus.CounterValue, float64(st.Ended))
	ch <- prometheus.MustNewConstMetric(a.evictedD, prometheus.CounterValue, float64(st.Evicted))
	ch <- prometheus.MustNewConstMetric(a.untrackD, prometheus.GaugeValue, float64(st.Untracked))
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, n := range a.byPolicy {
		ch <- prometheus.MustNewConstMetric(a.flowsD, prometheus.CounterValue, float64(n), k.verdict, k.tier, k.policy)
	}
}

// run follows the flow events until ctx ends, flushing the flow log every
// interval (and once more at the end).
func (a *flowAggregator) run(ctx context.Context) error {
	_, sub := a.fo.ObserveFlows(time.Now(), 0, true, flowAggBuffer)
	if sub == nil {
		return nil
	}
	defer sub.Close()
	tick := time.NewTicker(a.interval)
	defer tick.Stop()
	a.winStart = time.Now()
	for {
		select {
		case <-ctx.Done():
			a.flush(time.Now())
			return nil
		case now := <-tick.C:
			a.flush(now)
		case ev, ok := <-sub.Events():
			if !ok {
				a.flush(time.Now())
				return nil
			}
			a.add(&ev)
		}
	}
}

func (a *flowAggregator) add(ev *model.FlowEvent) {
	verdict, _, _ := decision(ev.Stage, ev.Allowed, ev.RuleID, ev.Rule, ev.RuleFound, ev.Direction)
	pk := flowPolicyKey{verdict: verdict, tier: ev.Rule.Tier, policy: ev.Rule.Policy}
	switch {
	case ev.Stage == model.TraceNoPolicy:
		pk.policy = "_no_policy"
	case ev.Rule.Synthetic != "":
		pk.policy = "_" + ev.Rule.Synthetic
	}
	if !ev.End { // dpd_flows_total counts decisions
		a.mu.Lock()
		if _, ok := a.byPolicy[pk]; !ok && len(a.byPolicy) >= maxFlowPolicySeries {
			pk = flowPolicyKey{verdict: verdict, policy: "_other"}
		}
		a.byPolicy[pk]++
		a.mu.Unlock()
	}
	if a.out == nil {
		return
	}
	src, dst := a.peers.sides(ev)
	name := func(ep *engine.EndpointInfo, ip string) string {
		if ep != nil {
			return ep.ID.String()
		}
		return ip
	}
	_, by, ref := decision(ev.Stage, ev.Allowed, ev.RuleID, ev.Rule, ev.RuleFound, ev.Direction)
	k := flowLogKey{src: name(src, ev.Src.Addr().String()), dst: name(dst, ev.Dst.Addr().String()),
		dstPort: ev.Dst.Port(), proto: ev.Proto, action: verdict, rule: flowfmt.RuleLabel(by, ref)}
	r, ok := a.window[k]
	if !ok {
		if len(a.window) >= maxFlowLogKeys {
			a.overflow.count(ev)
			return
		}
		r = &FlowLogRecord{Source: k.src, Dest: k.dst, DestPort: k.dstPort, Proto: protoName(k.proto),
			Action: k.action, Policy: k.rule}
		a.window[k] = r
	}
	r.count(ev)
}

// flush writes the interval's aggregates, sorted, and starts the next.
func (a *flowAggregator) flush(now time.Time) {
	if a.out == nil {
		return
	}
	recs := make([]*FlowLogRecord, 0, len(a.window)+1)
	for _, r := range a.window {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool {
		x, y := recs[i], recs[j]
		if x.Source != y.Source {
			return x.Source < y.Source
		}
		if x.Dest != y.Dest {
			return x.Dest < y.Dest
		}
		if x.DestPort != y.DestPort {
			return x.DestPort < y.DestPort
		}
		return x.Action+x.Policy+x.Proto < y.Action+y.Policy+y.Proto
	})
	if a.overflow.NumFlows > 0 || a.overflow.NumFlowsCompleted > 0 {
		o := a.overflow
		o.Overflow = true
		recs = append(recs, &o)
	}
	enc := json.NewEncoder(a.out)
	for _, r := range recs {
		r.StartTime, r.EndTime = a.winStart, now
		if err := enc.Encode(r); err != nil {
			a.log.Warn("write flow log", "err", err)
			break
		}
	}
	a.window, a.overflow, a.winStart = map[flowLogKey]*FlowLogRecord{}, FlowLogRecord{}, now
}

// newDaemonFlows opens cfg.FlowLog (appending) and builds the aggregator.
func newDaemonFlows(cfg Config, fo engine.FlowObserver, eng Engine) (*flowAggregator, error) {
	var out io.Writer
	switch cfg.FlowLog {
	case "":
	case "-":
		out = os.Stdout
	default:
		f, err := os.OpenFile(cfg.FlowLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return nil, fmt.Errorf("open flow log: %w", err)
		}
		out = f // open for the life of the process
	}
	return newFlowAggregator(fo, eng, out, cfg.FlowLogInterval, cfg.Log.With("component", "flowlog")), nil
}
