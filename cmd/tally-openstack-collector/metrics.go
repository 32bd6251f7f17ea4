package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newRegistry is the registry every package registers its metrics on, with the
// Go and process collectors and the metrics no package owns.
func newRegistry(b buildInfo) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tally_collector_build_info",
		Help: "Always 1; the labels say which build runs.",
	}, []string{"version", "commit", "go_version"})
	info.WithLabelValues(b.Version, b.Commit, runtime.Version()).Set(1)
	reg.MustRegister(info)
	return reg
}

// daemonMetrics are the daemon's own: its state, as seen by the probes.
type daemonMetrics struct {
	ready    prometheus.Gauge
	stopping prometheus.Gauge
}

func newDaemonMetrics(reg prometheus.Registerer) *daemonMetrics {
	m := &daemonMetrics{
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_collector_ready",
			Help: "1 while /readyz answers ok.",
		}),
		stopping: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_collector_stopping",
			Help: "1 once a graceful stop has begun.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.ready, m.stopping)
	}
	return m
}
