package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Traffic is P7: every case's measurements.
type Traffic struct {
	Slice               time.Duration
	Rounds              int
	PortRules, SetRules int
	// Steady is how long every path opened new connections before the
	// first measurement (trafficsteady.go); 0 when that was skipped.
	Steady time.Duration
	// Pinned says the load generator ran on CPU alone (trafficpin.go).
	Pinned bool
	CPU    int
	// DPDCores is dpd's CPU time during the measurements over their wall
	// time, in cores (0 when not measured).
	DPDCores float64
	Cases    []TrafficCase // in trafficCases' order
}

// TrafficCase is one case's measurements, one per round. For every case but
// the plain one, Base* are the plain path's measurements of the same
// rounds, taken next to them.
type TrafficCase struct {
	Key, Name string
	RR        []float64 // requests per second over one connection
	CRR       []float64 // connections (each one request) per second
	Bulk      []float64 // bits per second

	BaseRR, BaseCRR, BaseBulk []float64
	// Floor* are, for the dpd cases, the floor path's measurements of the
	// same rounds: what a TC program costs before it does anything.
	FloorRR, FloorCRR, FloorBulk []float64

	// Verdicts is, for the dpd cases, how many packets dpd's ingress
	// policy decided per new connection during each connection-rate
	// measurement (1: each connection's SYN, and nothing skipped it).
	Verdicts []float64
}

// medianOf is the median of v (0 for none).
func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianRatio is the median over rounds of num[i]/den[i], in percent: each
// round's pair took turns, so the machine's load, which drifts, cancels out
// of each ratio.
func medianRatio(num, den []float64) (float64, bool) {
	if len(num) == 0 || len(num) != len(den) {
		return 0, false
	}
	var rs []float64
	for i := range num {
		if num[i] <= 0 || den[i] <= 0 {
			return 0, false
		}
		rs = append(rs, 100*num[i]/den[i])
	}
	return medianOf(rs), true
}

func (t Traffic) find(key string) (TrafficCase, bool) {
	for _, c := range t.Cases {
		if c.Key == key {
			return c, true
		}
	}
	return TrafficCase{}, false
}

// metric picks one measurement kind and its plain base out of a case.
type metric func(TrafficCase) (values, base []float64)

// ratio is case key against base: "plain" uses the plain measurements of
// key's rounds; another case (measured in the same rounds) its own.
func (t Traffic) ratio(key, base string, m metric) (float64, bool) {
	a, ok := t.find(key)
	if !ok {
		return 0, false
	}
	av, ab := m(a)
	if base == "plain" {
		return medianRatio(av, ab)
	}
	b, ok := t.find(base)
	if !ok {
		return 0, false
	}
	bv, _ := m(b)
	return medianRatio(av, bv)
}

func crrOf(c TrafficCase) ([]float64, []float64)  { return c.CRR, c.BaseCRR }
func bulkOf(c TrafficCase) ([]float64, []float64) { return c.Bulk, c.BaseBulk }
func rrOf(c TrafficCase) ([]float64, []float64)   { return c.RR, c.BaseRR }

// trafficFigures are P7's rows of the results table.
func (r *Results) trafficFigures() []Figure {
	t := r.Traffic
	ports := fmt.Sprintf("last of %s port rules", thousands(t.PortRules))
	sets := fmt.Sprintf("last of %s IP-set rules", thousands(t.SetRules))
	fig := func(name, key, base string, metric metric, limit float64) Figure {
		v, ok := t.ratio(key, base, metric)
		return Figure{ID: "P7", Name: name, Value: v, Unit: "%", Limit: limit, AtLeast: true, Measured: ok}
	}
	return []Figure{
		fig("connection rate, dpd "+ports+", vs no dpd", "dpd-ports", "plain", crrOf, 95),
		fig("connection rate, dpd "+sets+", vs no dpd", "dpd-ipsets", "plain", crrOf, 95),
		fig("bulk throughput, dpd "+ports+", vs no dpd", "dpd-ports", "plain", bulkOf, 98),
		fig("bulk throughput, dpd "+sets+", vs no dpd", "dpd-ipsets", "plain", bulkOf, 98),
		fig("connection rate, dpd vs nftables, "+ports, "dpd-ports", "nft-ports", crrOf, 100),
		fig("connection rate, dpd vs nftables, "+sets, "dpd-ipsets", "nft-ipsets", crrOf, 100),
		fig("bulk throughput, dpd vs nftables, "+ports, "dpd-ports", "nft-ports", bulkOf, 100),
		fig("bulk throughput, dpd vs nftables, "+sets, "dpd-ipsets", "nft-ipsets", bulkOf, 100),
	}
}

func thousands(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%d,000", n/1000)
	}
	return fmt.Sprint(n)
}

// trafficDetails is P7's table: medians, the spread over the runs, and the
// ratio against no dpd.
func (r *Results) trafficDetails(w writer) {
	t := r.Traffic
	if len(t.Cases) == 0 {
		w("**P7**: not measured.\n\n")
		return
	}
	w("**P7** real traffic between two pods: medians of %d measurements of %s each per case (min–max in brackets), then the median "+
		"over the rounds of the case against the no-dpd measurement of the same round, in %%:\n\n", t.Rounds, t.Slice)
	w("| case | request/response, one connection | connection rate, new connection per request | bulk throughput, one connection |\n| --- | --- | --- | --- |\n")
	cell := func(c TrafficCase, metric metric, format func(float64) string) string {
		v, _ := metric(c)
		s := format(medianOf(v))
		if len(v) > 1 {
			s += fmt.Sprintf(" [%s–%s]", format(slices.Min(v)), format(slices.Max(v)))
		}
		if c.Key != "plain" {
			if p, ok := t.ratio(c.Key, "plain", metric); ok {
				s += fmt.Sprintf(", %.1f %%", p)
			}
		}
		return s
	}
	perSec := func(v float64) string { return fmt.Sprintf("%.0f/s", v) }
	gbit := func(v float64) string { return fmt.Sprintf("%.2f Gbit/s", v/1e9) }
	for _, c := range t.Cases {
		name := c.Name
		switch c.Key {
		case "dpd-ports", "nft-ports":
			name += fmt.Sprintf(" (%s)", thousands(t.PortRules))
		case "dpd-ipsets", "nft-ipsets":
			name += fmt.Sprintf(" (%s)", thousands(t.SetRules))
		}
		w("| %s | %s | %s | %s |\n", name, cell(c, rrOf, perSec), cell(c, crrOf, perSec), cell(c, bulkOf, gbit))
	}
	w("\n%s\n", t.cpuNote())
	var floor []string
	for _, c := range t.Cases {
		if len(c.FloorCRR) == 0 {
			continue
		}
		rr, _ := medianRatio(c.RR, c.FloorRR)
		crr, _ := medianRatio(c.CRR, c.FloorCRR)
		bulk, _ := medianRatio(c.Bulk, c.FloorBulk)
		floor = append(floor, fmt.Sprintf("%s %.1f / %.1f / %.1f %%", c.Key, rr, crr, bulk))
	}
	if len(floor) > 0 {
		w("\nThe same dpd measurements against the floor's of the same rounds (request/response / connection rate / bulk): "+
			"what dpd's programs cost beyond a TC program that does nothing: %s.\n", strings.Join(floor, "; "))
	}
	var verdicts []string
	for _, c := range t.Cases {
		if len(c.Verdicts) > 0 {
			verdicts = append(verdicts, fmt.Sprintf("%s %.3f–%.3f", c.Key, slices.Min(c.Verdicts), slices.Max(c.Verdicts)))
		}
	}
	if len(verdicts) > 0 {
		w("\ndpd's ingress policy verdicts per new connection during the connection-rate measurements, from its rule counters "+
			"(1 means every connection's SYN went through the policy and nothing else did): %s.\n", strings.Join(verdicts, "; "))
	}
	w("\n")
}

// cpuNote says where the load generator and dpd ran during P7.
func (t Traffic) cpuNote() string {
	where := "The load generator ran on every CPU (the machine has one, or pinning was not possible)."
	if t.Pinned {
		where = fmt.Sprintf("The load generator ran on CPU %d alone: client, server and their packets' softirq work on one CPU, "+
			"so each rate is what the case's packets cost that CPU; dpd's threads ran wherever the scheduler put them.", t.CPU)
	}
	if t.DPDCores > 0 {
		where += fmt.Sprintf(" dpd used %.1f %% of one core during the measurements (its flow-event reader and conntrack scanner).", 100*t.DPDCores)
	}
	return where
}
