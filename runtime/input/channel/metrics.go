package channel

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
)

type metrics struct {
	connections          prometheus.Gauge
	refusedConns         prometheus.Counter
	received             prometheus.Counter
	dropped              *prometheus.CounterVec
	mapped               prometheus.Counter
	skipped              prometheus.Counter
	unparseable          prometheus.Counter
	failed               prometheus.Counter
	committed            prometheus.Counter
	deadLettered         prometheus.Counter
	eventsCommitted      prometheus.Counter
	retries              prometheus.Counter
	abandoned            prometheus.Counter
	protocolErrors       prometheus.Counter
	idleTimeouts         prometheus.Counter
	refusedSubscriptions prometheus.Counter
	exceptions           prometheus.Counter
}

func name(n string) string { return "tally_collector_channel_" + n }

func counter(n, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name(n), Help: help})
}

func newMetrics(s *Server, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("connections"),
			Help: "Open connections to the channel socket."}),
		refusedConns: counter("refused_connections_total", "Connections closed at once: over the connection bound (all, or of one uid), or without peer credentials."),
		idleTimeouts: counter("idle_timeouts_total", "Connections closed because no frame (or not the rest of one) arrived within the idle timeout."),
		received:     counter("received_total", "Messages published to the channel (every PUBLISH frame read)."),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("dropped_total"),
			Help: "Messages the channel refused, by reason (credentials, invalid_type, invalid_json, invalid_tag, too_large, mode)."},
			[]string{"reason"}),
		mapped:               counter("mapped_total", "Channel messages the pipeline mapped."),
		skipped:              counter("skipped_total", "Channel messages the pipeline skipped (unclaimed tag, event over 64 KiB ...)."),
		unparseable:          counter("unparseable_total", "Channel messages the pipeline could not read (body over 1 MiB)."),
		failed:               counter("failed_total", "Channel messages whose mapper failed; dead-lettered."),
		committed:            counter("committed_total", "Channel messages acknowledged after their events were committed."),
		deadLettered:         counter("dead_lettered_total", "Channel messages acknowledged after they were committed to the dead-letter area."),
		eventsCommitted:      counter("events_committed_total", "Events of channel messages committed to the outbox."),
		retries:              counter("outbox_retries_total", "Channel batches the outbox refused (full or failing) and that were held and tried again."),
		abandoned:            counter("abandoned_total", "Channel messages left unanswered at a stop because their commit did not finish in time; the clients send them again."),
		protocolErrors:       counter("protocol_errors_total", "Connections closed on a protocol error (malformed frame, unsupported version, frame too large)."),
		refusedSubscriptions: counter("refused_subscriptions_total", "Subscriptions refused (bad expression, too many, raw unavailable, publish-only connection)."),
		exceptions:           counter("exceptions_total", "Unexpected errors: panics, accept errors."),
	}
	for _, r := range []string{dropCredentials, dropInvalidType, dropInvalidJSON, dropInvalidTag, dropTooLarge, dropMode} {
		m.dropped.WithLabelValues(r)
	}
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name("queued_bytes"),
		Help: "Bytes of channel messages received and not yet answered."},
		func() float64 { return float64(s.budget.inUse()) })
	h := s.hub.m
	if err := imetrics.Register(reg, m.connections, m.refusedConns, m.received, m.dropped, m.mapped,
		m.skipped, m.unparseable, m.failed, m.committed, m.deadLettered, m.eventsCommitted, m.retries,
		m.abandoned, m.protocolErrors, m.idleTimeouts, m.refusedSubscriptions, m.exceptions, queued,
		h.subscribers, h.subscriptions, h.delivered, h.dropped); err != nil {
		return nil, fmt.Errorf("channel: %w", err)
	}
	return m, nil
}

type hubMetrics struct {
	subscribers   prometheus.Gauge
	subscriptions prometheus.Gauge
	delivered     prometheus.Counter
	dropped       *prometheus.CounterVec
}

// newHubMetrics makes the tap's counters; the Server registers them with its
// own.
func newHubMetrics() *hubMetrics {
	m := &hubMetrics{
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("tap_subscribers"),
			Help: "Connections with at least one subscription."}),
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{Name: name("tap_subscriptions"),
			Help: "Subscriptions across all connections."}),
		delivered: counter("tap_delivered_total", "Messages queued to subscribers."),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name("tap_dropped_total"),
			Help: "Messages a subscriber did not receive, by reason (slow_subscriber, hub_overflow, permission)."},
			[]string{"reason"}),
	}
	for _, r := range []string{dropSlowSubscriber, dropHubOverflow, dropPermission} {
		m.dropped.WithLabelValues(r)
	}
	return m
}
