package felixwire

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTransportCounts: a transport's counters count per generation, and
// a series appears only once it counts something (as when each message
// looked its series up).
func TestTransportCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	tr := m.Transport("grpc")
	tr.Decoded(Result{Gen: Legacy})
	tr.Decoded(Result{Gen: Legacy, Unknown: 99})
	tr.Failed(&Error{Err: errMixed}) // no endpoint: a resync
	m.Transport("pipe").Decoded(Result{Gen: Current})
	var nilMetrics *Metrics
	nilMetrics.Transport("grpc").Decoded(Result{}) // counts nothing, does not panic

	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range s.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = s.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"dpd_felix_wire_messages_total,generation=legacy,transport=grpc":  2,
		"dpd_felix_wire_messages_total,generation=current,transport=pipe": 1,
		"dpd_felix_unknown_payloads_total,transport=grpc":                 1,
		"dpd_felix_decode_errors_total,outcome=resync,transport=grpc":     1,
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want exactly %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
