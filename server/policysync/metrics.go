package policysync

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpd-dev/dpd/proto/felix"
	"github.com/dpd-dev/dpd/server/felixconv"
)

// Metrics are the dpd_policysync_* metrics. A nil *Metrics counts nothing.
type Metrics struct {
	workloads   prometheus.Gauge
	clients     prometheus.Gauge
	sentTotal   *prometheus.CounterVec
	disconnects *prometheus.CounterVec
	reports     *prometheus.CounterVec
	limit       prometheus.Gauge
	refused     *prometheus.GaugeVec
	refusals    *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them in reg (nil: none).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		workloads: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dpd_policysync_workloads",
			Help: "Per-workload policy-sync sockets being served.",
		}),
		clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dpd_policysync_clients",
			Help: "Connected policy-sync Sync streams.",
		}),
		sentTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_policysync_messages_sent_total",
			Help: "Messages queued for policy-sync clients, by payload type.",
		}, []string{"payload"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_policysync_disconnects_total",
			Help: "Policy-sync streams ended by dpd or the client, by reason (closed, superseded, endpoint_removed, too_slow).",
		}, []string{"reason"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_policysync_reports_total",
			Help: "DataplaneStats reports received from policy-sync clients, by action (allowed, denied).",
		}, []string{"action"}),
		limit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dpd_policysync_workloads_limit",
			Help: "Most workloads policy sync serves (--policysync-max-workloads).",
		}),
		refused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dpd_policysync_workloads_refused",
			Help: "Credentials files present but not served, by reason (limit, descriptors, invalid, link).",
		}, []string{"reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_policysync_refused_total",
			Help: "Credentials files refused, by reason (limit, descriptors, invalid, link); a file is counted again when it changes or its reason does.",
		}, []string{"reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.workloads, m.clients, m.sentTotal, m.disconnects, m.reports, m.limit, m.refused, m.refusals} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func reasonOf(err error) string {
	switch {
	case errors.Is(err, ErrSuperseded):
		return "superseded"
	case errors.Is(err, ErrEndpointRemoved):
		return "endpoint_removed"
	case errors.Is(err, ErrTooSlow):
		return "too_slow"
	}
	return "closed"
}

func (m *Metrics) clientJoined() {
	if m != nil {
		m.clients.Inc()
	}
}

func (m *Metrics) clientLeft(reason string) {
	if m != nil {
		m.clients.Dec()
		m.disconnects.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) sent(msg *felix.ToDataplane) {
	if m != nil {
		m.sentTotal.WithLabelValues(felixconv.PayloadKind(msg)).Inc()
	}
}

func (m *Metrics) report(st *felix.DataplaneStats) {
	if m != nil {
		action := "allowed"
		if st.GetAction() == felix.Action_DENIED {
			action = "denied"
		}
		m.reports.WithLabelValues(action).Inc()
	}
}

func (m *Metrics) workloadAdded(delta float64) {
	if m != nil {
		m.workloads.Add(delta)
	}
}

func (m *Metrics) setLimit(n int) {
	if m != nil {
		m.limit.Set(float64(n))
	}
}

func (m *Metrics) refusedNow(reason string, delta float64) {
	if m != nil {
		m.refused.WithLabelValues(reason).Add(delta)
	}
}

func (m *Metrics) refusal(reason string) {
	if m != nil {
		m.refusals.WithLabelValues(reason).Inc()
	}
}
