package felixwire

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what the wire edge decoded, per transport ("grpc",
// "pipe"). A nil *Metrics counts nothing.
type Metrics struct {
	messages *prometheus.CounterVec
	errors   *prometheus.CounterVec
	unknown  *prometheus.CounterVec
}

// NewMetrics registers the wire metrics in reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_felix_wire_messages_total",
			Help: "Controller messages decoded, by transport and the Felix wire generation they were recognised as (current: v3.32+, legacy: v3.28-v3.31).",
		}, []string{"transport", "generation"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_felix_decode_errors_total",
			Help: "Controller messages that could not be decoded, by transport and outcome (endpoint: that workload endpoint was put in error; resync: the session was ended).",
		}, []string{"transport", "outcome"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_felix_unknown_payloads_total",
			Help: "Controller messages ignored because their payload is unknown to this build (a newer sender).",
		}, []string{"transport"}),
	}
	for _, c := range []prometheus.Collector{m.messages, m.errors, m.unknown} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register felix wire metrics: %w", err)
		}
	}
	return m, nil
}

// Transport returns the counters of one transport, for one session's
// decoder: it looks each series up once, not per message (by label values
// a lookup hashes them). A nil *Metrics gives a nil *Transport, which
// counts nothing.
func (m *Metrics) Transport(name string) *Transport {
	if m == nil {
		return nil
	}
	return &Transport{m: m, name: name}
}

// Transport counts what one session's decoder decoded. Series are
// resolved on first use, so one appears only once it counts something,
// as before. Not safe for concurrent use (a session decodes in order).
type Transport struct {
	m       *Metrics
	name    string
	decoded [Legacy + 1]prometheus.Counter // per Generation
	unknown prometheus.Counter
}

// Decoded counts one decoded message.
func (t *Transport) Decoded(r Result) {
	if t == nil {
		return
	}
	c := t.decoded[r.Gen]
	if c == nil {
		c = t.m.messages.WithLabelValues(t.name, r.Gen.String())
		t.decoded[r.Gen] = c
	}
	c.Inc()
	if r.Unknown != 0 {
		if t.unknown == nil {
			t.unknown = t.m.unknown.WithLabelValues(t.name)
		}
		t.unknown.Inc()
	}
}

// Failed counts one message that did not decode.
func (t *Transport) Failed(e *Error) {
	if t == nil {
		return
	}
	outcome := "endpoint"
	if e.Resync() {
		outcome = "resync"
	}
	t.m.errors.WithLabelValues(t.name, outcome).Inc()
}
