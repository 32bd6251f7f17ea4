package broker

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
)

type metrics struct {
	consumed         prometheus.Counter
	acked            prometheus.Counter
	nacked           prometheus.Counter
	reconnects       prometheus.Counter
	missingExchanges prometheus.Gauge
	refusedBindings  prometheus.Gauge
	blocked          prometheus.Gauge
	paused           prometheus.Gauge
	pauses           prometheus.Counter
	commitSeconds    prometheus.Histogram
}

// newMetrics builds the consumer's metrics and registers them on reg (nil:
// nowhere), all or none.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		consumed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_collector_consumed_total",
			Help: "Deliveries received from the broker.",
		}),
		acked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_collector_acked_total",
			Help: "Deliveries acknowledged on the broker (after their outbox commit).",
		}),
		nacked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_collector_nacked_total",
			Help: "Deliveries returned to the queue (back-pressure or a refused outbox insert).",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_collector_reconnects_total",
			Help: "Broker sessions that ended and were started again.",
		}),
		missingExchanges: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_collector_missing_exchanges",
			Help: "Listed exchanges the broker does not carry (probed again with backoff).",
		}),
		refusedBindings: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_collector_refused_bindings",
			Help: "Bindings the broker refused in the current session (topic permissions).",
		}),
		blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_collector_broker_blocked",
			Help: "1 while the broker has blocked the connection (resource alarm).",
		}),
		paused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_collector_consumer_paused",
			Help: "1 while consumption is stopped at the outbox bound.",
		}),
		pauses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_collector_consumer_pauses_total",
			Help: "Times consumption was stopped at the outbox bound (events or dead letters a replay could deliver).",
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_collector_commit_duration_seconds",
			Help:    "Time of one outbox commit of a delivery batch.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	err := imetrics.Register(reg, m.consumed, m.acked, m.nacked, m.reconnects, m.missingExchanges,
		m.refusedBindings, m.blocked, m.paused, m.pauses, m.commitSeconds)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	return m, nil
}
