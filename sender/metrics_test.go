package sender_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-billing/tally-openstack-collector/sender"
)

// TestMetricsRegisteredOnce: a second sender on the same registry is an error
// naming the metric.
func TestMetricsRegisteredOnce(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	opts := sender.Options{URL: "https://tally.example.com", Token: "t", Registerer: reg}
	if _, err := sender.New(e.ob, opts); err != nil {
		t.Fatal(err)
	}
	_, err := sender.New(e.ob, opts)
	if err == nil || !strings.Contains(err.Error(), "tally_collector_sent_events_total") {
		t.Fatalf("second sender: %v", err)
	}
}
