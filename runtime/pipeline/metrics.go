package pipeline

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	mapped      prometheus.Counter
	skipped     *prometheus.CounterVec
	unparseable prometheus.Counter
	failures    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		mapped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_collector_mapped_total",
			Help: "Messages mapped to events (a message may yield zero or more events).",
		}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_collector_skipped_total",
			Help: "Messages or events skipped, by reason (unclaimed, event_too_large, no_event_type, versioned).",
		}, []string{"reason"}),
		unparseable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_collector_unparseable_total",
			Help: "Messages whose body could not be read (over 1 MiB, or not JSON).",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_collector_mapper_failures_total",
			Help: "Mapper calls that failed, by reason (trap, timeout, memory, invalid_output, abi, guest_error).",
		}, []string{"reason"}),
	}
	// Pre-create the bounded label values so dashboards see zeros.
	for _, r := range []string{ReasonUnclaimed, ReasonEventTooLarge, ReasonNoEventType, ReasonVersioned} {
		m.skipped.WithLabelValues(r)
	}
	for _, r := range []string{"trap", "timeout", "memory", "invalid_output", "abi", "guest_error"} {
		m.failures.WithLabelValues(r)
	}
	if reg != nil {
		m.mapped = register(reg, m.mapped)
		m.skipped = register(reg, m.skipped)
		m.unparseable = register(reg, m.unparseable)
		m.failures = register(reg, m.failures)
	}
	return m
}

// register registers c, or returns the collector already registered under the
// same description, so that several pipelines (a replay beside the live one)
// share their counters.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
