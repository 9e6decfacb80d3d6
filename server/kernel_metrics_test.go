package server

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpd-dev/dpd/dataplane/engine"
	"github.com/dpd-dev/dpd/dataplane/model"
)

func TestKernelCollector(t *testing.T) {
	eng := fakeEngine{eps: map[string]engine.EndpointInfo{"a": {ID: model.WorkloadID{Workload: "a"}, Iface: "calia"}}}
	var rules []model.RuleInfo
	counters := map[uint64][2]uint64{}
	for i := range 5 {
		id := uint64(i + 1)
		rules = append(rules, model.RuleInfo{CounterID: id, Tier: "t", Policy: "t/p", Kind: "policy", Index: i, RuleID: "r", Action: model.ActionAllow})
		counters[id] = [2]uint64{id * 10, id * 1000} // rule 5 is the busiest
	}
	k := &fakeKernel{rulesFor: map[model.Direction][]model.RuleInfo{model.Ingress: rules}, counters: counters}

	for _, tt := range []struct {
		limit, wantRules int
	}{{0, 0}, {2, 2}, {10, 5}} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(newKernelCollector(k, eng, tt.limit))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				got[mf.GetName()] = append(got[mf.GetName()], m.GetGauge().GetValue()+m.GetCounter().GetValue())
			}
		}
		if len(got["dpd_rule_packets_total"]) != tt.wantRules {
			t.Errorf("limit %d: %d rule series, want %d", tt.limit, len(got["dpd_rule_packets_total"]), tt.wantRules)
		}
		if tt.limit == 2 && (got["dpd_rule_packets_total"][0]+got["dpd_rule_packets_total"][1] != 90) {
			t.Errorf("limit 2 exported %v packets, want the two busiest (50 + 40)", got["dpd_rule_packets_total"])
		}
		if v := got["dpd_conntrack_entries"]; len(v) != 1 || v[0] != 3 {
			t.Errorf("conntrack entries = %v", v)
		}
		if len(got["dpd_bpf_map_entries"]) != 2 || len(got["dpd_bpf_map_capacity"]) != 2 {
			t.Errorf("map series: %v", got)
		}
		// Only measured costs are series: the fake probed one op and observed one.
		if v := got["dpd_kernel_op_probe_seconds"]; len(v) != 1 || v[0] != 0.001 {
			t.Errorf("probe costs = %v", v)
		}
		if v := got["dpd_kernel_op_observed_seconds"]; len(v) != 1 || v[0] != 0.002 {
			t.Errorf("observed costs = %v", v)
		}
		if v := got["dpd_attach_mode_info"]; len(v) != 1 || v[0] != 1 {
			t.Errorf("attach mode info = %v", v)
		}
	}
}

// Maps the kernel could not count are left out and counted in
// dpd_kernel_scrape_errors; the others are still reported.
func TestKernelCollectorErrors(t *testing.T) {
	k := &fakeKernel{
		usage:    []model.MapUsage{{Name: "dpd_ipsets", Entries: 10, Capacity: 100}},
		usageErr: errors.Join(errors.New("count dpd_conntrack: boom"), errors.New("count dpd_rule_ctrs: boom")),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newKernelCollector(k, fakeEngine{}, 0))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] += m.GetGauge().GetValue()
		}
	}
	if got["dpd_kernel_scrape_errors"] != 2 || got["dpd_bpf_map_entries"] != 10 {
		t.Errorf("metrics %v: want 2 scrape errors and the ip set entries", got)
	}
	if _, ok := got["dpd_conntrack_entries"]; ok {
		t.Error("conntrack reported though it could not be counted")
	}
}

// dropKernel is a fakeKernel whose datapath counts drops.
type dropKernel struct {
	fakeKernel
	drops []model.DropCount
	err   error
}

func (k *dropKernel) Drops() ([]model.DropCount, error) { return k.drops, k.err }

// Datapath drop counters are series per reason when the kernel counts
// them; a failed read is a scrape error.
func TestKernelCollectorDrops(t *testing.T) {
	gather := func(k engine.KernelInspector) map[string]map[string]float64 {
		t.Helper()
		reg := prometheus.NewRegistry()
		reg.MustRegister(newKernelCollector(k, fakeEngine{}, 0))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				label := ""
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						label = l.GetValue()
					}
				}
				if got[mf.GetName()] == nil {
					got[mf.GetName()] = map[string]float64{}
				}
				got[mf.GetName()][label] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		return got
	}
	k := &dropKernel{drops: []model.DropCount{{Reason: "fragment_without_first", Packets: 3, Bytes: 4500}, {Reason: "fragment_tiny_tcp"}}}
	got := gather(k)
	if v := got["dpd_datapath_drops_total"]; len(v) != 2 || v["fragment_without_first"] != 3 {
		t.Errorf("drops %v, want 2 reasons with 3 fragments without their first", v)
	}
	if v := got["dpd_datapath_drop_bytes_total"]["fragment_without_first"]; v != 4500 {
		t.Errorf("drop bytes %v", v)
	}
	if got["dpd_kernel_scrape_errors"][""] != 0 {
		t.Errorf("scrape errors %v", got["dpd_kernel_scrape_errors"])
	}
	k.drops, k.err = nil, errors.New("read drop counter: boom")
	if got := gather(k); got["dpd_kernel_scrape_errors"][""] != 1 {
		t.Errorf("a failed drop read: scrape errors %v, want 1", got["dpd_kernel_scrape_errors"])
	}
	if got := gather(&fakeKernel{}); got["dpd_datapath_drops_total"] != nil {
		t.Error("a kernel without drop counters exported drop series")
	}
}
