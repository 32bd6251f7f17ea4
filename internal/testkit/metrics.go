package testkit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric answers the value of the series of the metric name gathered from g
// whose label values include every one of labels (a counter's, a gauge's or
// an untyped metric's value). It fails the test when there is none.
func Metric(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]bool{}
			for _, lp := range m.GetLabel() {
				have[lp.GetValue()] = true
			}
			for _, l := range labels {
				if !have[l] {
					continue metric
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			default:
				return m.GetUntyped().GetValue()
			}
		}
	}
	tb.Fatalf("no metric %s%v", name, labels)
	return 0
}
