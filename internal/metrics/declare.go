package metrics

import "github.com/prometheus/client_golang/prometheus"

// Counter declares a counter.
func Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// Gauge declares a gauge.
func Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// GaugeFunc declares a gauge whose value f answers at each scrape.
func GaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
}

// Histogram declares a histogram with the given bucket upper bounds.
func Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// Label is a label of a family of counters, with the values it is known to
// take beforehand.
type Label struct {
	Name   string
	Values []string
}

// By names a label and the values it is known to take beforehand; none when
// they are only known as they come (a mapper's name).
func By(name string, values ...string) Label {
	return Label{Name: name, Values: values}
}

// CounterVec declares a family of counters by labels. Every combination of
// the labels' values is created at once, at zero, so that a dashboard sees
// the series and increase() sees the first count; a label given without
// values leaves each series to be created by its first count.
func CounterVec(name, help string, labels ...Label) *prometheus.CounterVec {
	names := make([]string, len(labels))
	for i, l := range labels {
		names[i] = l.Name
	}
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, names)
	for _, values := range combinations(labels) {
		v.WithLabelValues(values...)
	}
	return v
}

// combinations lists every combination of the labels' values, one value of
// each label in order; none when a label has no values.
func combinations(labels []Label) [][]string {
	out := [][]string{nil}
	for _, l := range labels {
		var next [][]string
		for _, prefix := range out {
			for _, v := range l.Values {
				next = append(next, append(prefix[:len(prefix):len(prefix)], v))
			}
		}
		out = next
	}
	return out
}
