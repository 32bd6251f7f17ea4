package catalog

import (
	"github.com/prometheus/client_golang/prometheus"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
)

type metrics struct {
	reloads    *prometheus.CounterVec
	shadow     *prometheus.CounterVec
	migrations prometheus.Gauge
	lastOK     prometheus.Gauge
	skipped    *prometheus.CounterVec
	decisions  *prometheus.CounterVec
	deferred   prometheus.Gauge
	// Built-in modules loaded on first use (lazy.go).
	builtinsCompiled prometheus.Gauge
	builtinCompiles  *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reloads: imetrics.CounterVec("tally_collector_mapper_reloads_total",
			"Reloads of the drop-in mapper directory that changed something or failed, by result (ok, error).",
			imetrics.By("result", "ok", "error")),
		shadow: imetrics.CounterVec("tally_collector_mapper_shadow_comparisons_total",
			"Calls of a candidate mapper in shadow compared with the active one, by mapper name and result (match, difference).",
			imetrics.By("mapper"), imetrics.By("result")),
		migrations: imetrics.Gauge("tally_collector_mapper_migrations",
			"Mapper migrations in progress (a candidate in shadow)."),
		lastOK: imetrics.Gauge("tally_collector_mapper_last_reload_ok",
			"1 when the last reload of the drop-in mapper directory took every change, 0 when it rejected something or failed."),
		skipped: imetrics.CounterVec("tally_collector_mapper_files_skipped_total",
			"Files of the drop-in mapper directory skipped without being read, by reason (not_regular, too_large, outside_dir, unreadable); counted again only when the file's stat changes.",
			imetrics.By("reason", "not_regular", "too_large", "outside_dir", "unreadable")),
		decisions: imetrics.CounterVec("tally_collector_mapper_decisions_received_total",
			"Promote and abort decisions of other replicas, by action (promote, abort) and result (applied, deferred, ignored); a deferred decision counts again when its candidate appears.",
			imetrics.By("action", DecisionPromote, DecisionAbort),
			imetrics.By("result", DecisionApplied, DecisionDeferred, DecisionIgnored)),
		deferred: imetrics.Gauge("tally_collector_mapper_decisions_deferred",
			"Decisions of other replicas kept until their candidate reaches this one."),
		builtinsCompiled: imetrics.Gauge("tally_collector_mapper_builtins_compiled",
			"Built-in mapper modules compiled and in memory; the others are compiled when the first notification they claim arrives."),
		builtinCompiles: imetrics.CounterVec("tally_collector_mapper_builtin_compiles_total",
			"Built-in mapper modules compiled on first use, by result (ok, error); after an error the module's notifications are dead-lettered with reason load, and compiling is tried again 30s later.",
			imetrics.By("result", "ok", "error")),
	}
	m.lastOK.Set(1)
	return m
}

// register registers the metrics on reg (nil: nowhere), all or none.
func (m *metrics) register(reg prometheus.Registerer) error {
	return imetrics.Register(reg, m.reloads, m.shadow, m.migrations, m.lastOK, m.skipped, m.decisions, m.deferred,
		m.builtinsCompiled, m.builtinCompiles)
}
