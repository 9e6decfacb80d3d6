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

// Decoded counts one decoded message.
func (m *Metrics) Decoded(transport string, r Result) {
	if m == nil {
		return
	}
	m.messages.WithLabelValues(transport, r.Gen.String()).Inc()
	if r.Unknown != 0 {
		m.unknown.WithLabelValues(transport).Inc()
	}
}

// Failed counts one message that did not decode.
func (m *Metrics) Failed(transport string, e *Error) {
	if m == nil {
		return
	}
	outcome := "endpoint"
	if e.Resync() {
		outcome = "resync"
	}
	m.errors.WithLabelValues(transport, outcome).Inc()
}
