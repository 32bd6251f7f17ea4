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
		consumed: imetrics.Counter("tally_collector_consumed_total",
			"Deliveries received from the broker."),
		acked: imetrics.Counter("tally_collector_acked_total",
			"Deliveries acknowledged on the broker (after their outbox commit)."),
		nacked: imetrics.Counter("tally_collector_nacked_total",
			"Deliveries returned to the queue (back-pressure or a refused outbox insert)."),
		reconnects: imetrics.Counter("tally_collector_reconnects_total",
			"Broker sessions that ended and were started again."),
		missingExchanges: imetrics.Gauge("tally_collector_missing_exchanges",
			"Listed exchanges the broker does not carry (probed again with backoff)."),
		refusedBindings: imetrics.Gauge("tally_collector_refused_bindings",
			"Bindings the broker refused in the current session (topic permissions)."),
		blocked: imetrics.Gauge("tally_collector_broker_blocked",
			"1 while the broker has blocked the connection (resource alarm)."),
		paused: imetrics.Gauge("tally_collector_consumer_paused",
			"1 while consumption is stopped at the outbox bound."),
		pauses: imetrics.Counter("tally_collector_consumer_pauses_total",
			"Times consumption was stopped at the outbox bound (events or dead letters a replay could deliver)."),
		commitSeconds: imetrics.Histogram("tally_collector_commit_duration_seconds",
			"Time of one outbox commit of a delivery batch.",
			prometheus.ExponentialBuckets(0.0005, 2, 14)),
	}
	err := imetrics.Register(reg, m.consumed, m.acked, m.nacked, m.reconnects, m.missingExchanges,
		m.refusedBindings, m.blocked, m.paused, m.pauses, m.commitSeconds)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	return m, nil
}
