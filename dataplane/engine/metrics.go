package engine

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the engine's dpd_* metrics. They always exist; they are
// registered only when Options.Registry is set.
type metrics struct {
	received *prometheus.CounterVec
	// receivedBy is received's counter per payload, looked up once: by
	// label values each lookup hashes them, and dispatch counts every
	// message. Only the engine's loop uses it.
	receivedBy    map[string]prometheus.Counter
	invalid       *prometheus.CounterVec
	batch         prometheus.Histogram
	applyDuration prometheus.Histogram
	applyFailures *prometheus.CounterVec
	dirty         prometheus.Gauge
	happy         prometheus.Gauge
	latency       prometheus.Histogram
	inboxFull     prometheus.Counter

	statusPending    prometheus.Gauge
	statusCoalesced  prometheus.Counter
	controllerBehind prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		receivedBy: map[string]prometheus.Counter{},
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_messages_received_total",
			Help: "Messages received from the controller, by payload type.",
		}, []string{"payload"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_invalid_messages_total",
			Help: "Messages rejected as invalid, by payload type.",
		}, []string{"payload"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dpd_batch_size",
			Help:    "Messages handled per engine loop iteration.",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
		}),
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dpd_apply_duration_seconds",
			Help:    "Duration of apply passes that changed the kernel.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		applyFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dpd_apply_failures_total",
			Help: "Failed kernel calls, by object kind; each is retried with backoff.",
		}, []string{"kind"}),
		dirty: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dpd_dirty_endpoints",
			Help: "Workload endpoints waiting to be applied.",
		}),
		happy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dpd_happy_endpoints",
			Help: "Workload endpoints fully programmed with their interface up.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dpd_endpoint_programming_latency_seconds",
			Help:    "From receiving a WorkloadEndpointUpdate to the endpoint being up.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}),
		inboxFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dpd_inbox_full_total",
			Help: "Times a sender blocked because the engine inbox was full.",
		}),
		statusPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dpd_status_pending",
			Help: "Statuses waiting for the controller to read them.",
		}),
		statusCoalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dpd_status_coalesced_total",
			Help: "Unread statuses replaced by a newer one of the same subject.",
		}),
		controllerBehind: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dpd_controller_behind_total",
			Help: "Controller sessions ended because their unread statuses passed the cap.",
		}),
	}
	if reg == nil {
		return m
	}
	for _, c := range []prometheus.Collector{m.received, m.invalid, m.batch, m.applyDuration,
		m.applyFailures, m.dirty, m.happy, m.latency, m.inboxFull,
		m.statusPending, m.statusCoalesced, m.controllerBehind} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				log.Warn("register metric", "err", err)
			}
		}
	}
	return m
}

// receivedFor is the received counter of payload kind.
func (m *metrics) receivedFor(kind string) prometheus.Counter {
	c, ok := m.receivedBy[kind]
	if !ok {
		c = m.received.WithLabelValues(kind)
		m.receivedBy[kind] = c
	}
	return c
}
