package pipeline

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-billing/tally-openstack-collector/runtime"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/contract"
)

type metrics struct {
	mapped      prometheus.Counter
	skipped     *prometheus.CounterVec
	unparseable *prometheus.CounterVec
	failures    *prometheus.CounterVec
	dropped     [contract.NumViolations]prometheus.Counter
	droppedVec  *prometheus.CounterVec
}

// newMetrics builds the pipeline's metrics and registers them on reg (nil:
// nowhere), all or none.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		mapped: imetrics.Counter("tally_collector_mapped_total",
			"Messages mapped to events (a message may yield zero or more events)."),
		skipped: imetrics.CounterVec("tally_collector_skipped_total",
			"Messages or events skipped, by reason (unclaimed, event_too_large, no_event_type, versioned).",
			imetrics.By("reason", ReasonUnclaimed, ReasonEventTooLarge, ReasonNoEventType, ReasonVersioned)),
		unparseable: imetrics.CounterVec("tally_collector_unparseable_total",
			"Messages whose body could not be read, by reason (body_too_large, not_json, bad_compression, decompressed_too_large, decoder_limit).",
			imetrics.By("reason", unparseableReasons...)),
		failures: imetrics.CounterVec("tally_collector_mapper_failures_total",
			"Mapper calls that failed, by reason (trap, timeout, budget, memory, invalid_output, invalid_event, abi, guest_error, load).",
			imetrics.By("reason", "trap", "timeout", "budget", "memory", "invalid_output", "invalid_event", "abi", "guest_error", "load")),
		droppedVec: imetrics.CounterVec("tally_collector_event_members_dropped_total",
			"Members left out of events by the event contract, by what they broke (negative, not_finite, out_of_range, wrong_type, bad_timestamp, blank, not_printable, too_long, null, nested, unknown_member, duplicate).",
			imetrics.By("reason")),
	}
	for v := contract.OK + 1; int(v) < contract.NumViolations; v++ {
		if v != contract.Missing { // a missing member fails the event instead
			m.dropped[v] = m.droppedVec.WithLabelValues(v.String())
		}
	}
	if err := imetrics.Register(reg, m.mapped, m.skipped, m.unparseable, m.failures, m.droppedVec); err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	return m, nil
}

// countDropped counts the members the contract left out, and reports the
// first reason (none: "").
func (m *metrics) countDropped(d *runtime.Drops) string {
	first := ""
	for v, n := range d {
		if n > 0 && m.dropped[v] != nil {
			m.dropped[v].Add(float64(n))
			if first == "" {
				first = contract.Violation(v).String()
			}
		}
	}
	return first
}
