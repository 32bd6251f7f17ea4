package daemon

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	imetrics "github.com/tally-billing/tally-openstack-collector/internal/metrics"
)

// newRegistry is the registry every package registers its metrics on, with the
// Go and process collectors and the metrics no package owns.
func newRegistry(b BuildInfo) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tally_collector_build_info",
		Help: "Always 1; the labels say which build runs.",
	}, []string{"version", "commit", "go_version"})
	info.WithLabelValues(b.Version, b.Commit, runtime.Version()).Set(1)
	err := imetrics.Register(reg,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
	)
	if err != nil {
		return nil, err
	}
	return reg, nil
}

// daemonMetrics are the daemon's own: its state, as seen by the probes.
type daemonMetrics struct {
	ready    prometheus.Gauge
	stopping prometheus.Gauge
}

func newDaemonMetrics(reg prometheus.Registerer) (*daemonMetrics, error) {
	m := &daemonMetrics{
		ready:    imetrics.Gauge("tally_collector_ready", "1 while /readyz answers ok."),
		stopping: imetrics.Gauge("tally_collector_stopping", "1 once a graceful stop has begun."),
	}
	if err := imetrics.Register(reg, m.ready, m.stopping); err != nil {
		return nil, err
	}
	return m, nil
}
