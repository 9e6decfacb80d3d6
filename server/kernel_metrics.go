package server

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpd-dev/dpd/dataplane/engine"
)

// kernelCollector asks the kernel at scrape time: map fill levels,
// conntrack entries and, opt-in, the busiest rules' counters.
type kernelCollector struct {
	kv        engine.KernelInspector
	engine    Engine
	ruleLimit int // 0: no per-rule series

	mapEntries, mapCapacity, conntrack, errors *prometheus.Desc
	rulePackets, ruleBytes                     *prometheus.Desc
	attachMode, opProbe, opObserved            *prometheus.Desc
	dropPackets, dropBytes                     *prometheus.Desc
}

func newKernelCollector(kv engine.KernelInspector, eng Engine, ruleLimit int) *kernelCollector {
	ruleLabels := []string{"direction", "tier", "policy", "rule", "rule_id", "action"}
	return &kernelCollector{
		kv: kv, engine: eng, ruleLimit: ruleLimit,
		mapEntries: prometheus.NewDesc("dpd_bpf_map_entries",
			"Entries in a BPF map: what dpd wrote to it (conntrack, written by the programs: counted at most every 10 s).", []string{"map"}, nil),
		mapCapacity: prometheus.NewDesc("dpd_bpf_map_capacity",
			"max_entries of a BPF map.", []string{"map"}, nil),
		conntrack: prometheus.NewDesc("dpd_conntrack_entries",
			"Entries in the BPF conntrack table (live or awaiting expiry), counted at most every 10 s.", nil, nil),
		errors: prometheus.NewDesc("dpd_kernel_scrape_errors",
			"Maps that could not be read during this scrape.", nil, nil),
		rulePackets: prometheus.NewDesc("dpd_rule_packets_total",
			"Packets decided by a policy rule (only the busiest rules, --rule-metrics-limit).", ruleLabels, nil),
		ruleBytes: prometheus.NewDesc("dpd_rule_bytes_total",
			"Bytes of the packets decided by a policy rule (same rules as dpd_rule_packets_total).", ruleLabels, nil),
		attachMode: prometheus.NewDesc("dpd_attach_mode_info",
			"The attach mode of entry programs (1 for the mode in force), with the reason it was chosen.", []string{"mode", "reason"}, nil),
		opProbe: prometheus.NewDesc("dpd_kernel_op_probe_seconds",
			"What a kernel operation cost in the start-up probe on a scratch veth.", []string{"op"}, nil),
		opObserved: prometheus.NewDesc("dpd_kernel_op_observed_seconds",
			"Mean cost of dpd's real kernel operations of a kind, over dpd_kernel_op_observed_count of them.", []string{"op"}, nil),
		dropPackets: prometheus.NewDesc("dpd_datapath_drops_total",
			"Packets the entry programs dropped for a reason no rule counts: fragment_without_first (a later fragment whose first piece its hook did not see), fragment_tiny_tcp, ipv6_too_many_ext_headers.", []string{"reason"}, nil),
		dropBytes: prometheus.NewDesc("dpd_datapath_drop_bytes_total",
			"Bytes of the packets in dpd_datapath_drops_total.", []string{"reason"}, nil),
	}
}

func (c *kernelCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.mapEntries, c.mapCapacity, c.conntrack, c.errors, c.attachMode, c.opProbe, c.opObserved,
		c.dropPackets, c.dropBytes} {
		ch <- d
	}
	if c.ruleLimit > 0 {
		ch <- c.rulePackets
		ch <- c.ruleBytes
	}
}

func (c *kernelCollector) Collect(ch chan<- prometheus.Metric) {
	usage, err := c.kv.MapUsage()
	failed := 0
	if err != nil {
		failed = max(1, countJoined(err)) // the maps that could be read are still reported
	}
	for _, u := range usage {
		ch <- prometheus.MustNewConstMetric(c.mapEntries, prometheus.GaugeValue, float64(u.Entries), u.Name)
		ch <- prometheus.MustNewConstMetric(c.mapCapacity, prometheus.GaugeValue, float64(u.Capacity), u.Name)
		if u.Conntrack {
			ch <- prometheus.MustNewConstMetric(c.conntrack, prometheus.GaugeValue, float64(u.Entries))
		}
	}
	if di, ok := c.kv.(engine.DropInspector); ok {
		drops, err := di.Drops()
		if err != nil {
			failed += max(1, countJoined(err))
		}
		for _, d := range drops {
			ch <- prometheus.MustNewConstMetric(c.dropPackets, prometheus.CounterValue, float64(d.Packets), d.Reason)
			ch <- prometheus.MustNewConstMetric(c.dropBytes, prometheus.CounterValue, float64(d.Bytes), d.Reason)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.GaugeValue, float64(failed))
	c.collectAttach(ch)
	if c.ruleLimit > 0 {
		c.collectRules(ch)
	}
}

// collectRules emits the ruleLimit rules with the most packets: cardinality
// stays bounded however many policies there are.
func (c *kernelCollector) collectRules(ch chan<- prometheus.Metric) {
	counters := readCounters(c.kv, ruleTable(c.kv, c.engine.Endpoints()), false, true)
	sort.SliceStable(counters, func(i, j int) bool { return counters[i].GetPackets() > counters[j].GetPackets() })
	if len(counters) > c.ruleLimit {
		counters = counters[:c.ruleLimit]
	}
	for _, rc := range counters {
		r := rc.GetRule()
		rule := strconv.Itoa(int(r.GetIndex()))
		if r.GetSynthetic() != "" {
			rule = r.GetSynthetic()
		}
		labels := []string{r.GetDirection(), r.GetTier(), r.GetPolicy(), rule, r.GetRuleId(), r.GetAction()}
		ch <- prometheus.MustNewConstMetric(c.rulePackets, prometheus.CounterValue, float64(rc.GetPackets()), labels...)
		ch <- prometheus.MustNewConstMetric(c.ruleBytes, prometheus.CounterValue, float64(rc.GetBytes()), labels...)
	}
}

// countJoined is how many errors errors.Join put into err (1 for a single
// one).
func countJoined(err error) int {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	if err != nil {
		return 1
	}
	return 0
}

// collectAttach reports the attach mode and the kernel operation costs.
func (c *kernelCollector) collectAttach(ch chan<- prometheus.Metric) {
	a := c.kv.AttachInfo()
	ch <- prometheus.MustNewConstMetric(c.attachMode, prometheus.GaugeValue, 1, a.Mode, a.Reason)
	for _, k := range a.Costs {
		if k.Probe > 0 {
			ch <- prometheus.MustNewConstMetric(c.opProbe, prometheus.GaugeValue, k.Probe.Seconds(), k.Op)
		}
		if k.ObservedCount > 0 {
			ch <- prometheus.MustNewConstMetric(c.opObserved, prometheus.GaugeValue, k.ObservedMean.Seconds(), k.Op)
		}
	}
}
