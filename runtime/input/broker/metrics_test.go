package broker

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// TestMetricsRegisteredOnce: a second consumer on the same registry is an
// error naming the metric, not a panic.
func TestMetricsRegisteredOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := Options{TransportURL: "amqp://guest:guest@127.0.0.1:5672/", Exchanges: []string{"nova"}, Logger: zerolog.Nop(), Registerer: reg}
	proc, box := newTestProcessor(t), openOutbox(t, t.TempDir(), 10)
	if _, err := New(proc, box, opts); err != nil {
		t.Fatal(err)
	}
	_, err := New(proc, box, opts)
	if err == nil || !strings.Contains(err.Error(), "tally_collector_consumed_total") {
		t.Fatalf("second consumer: %v", err)
	}
}

// TestControlMetricsRegisteredOnce: so does a second control link.
func TestControlMetricsRegisteredOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := &replicaLink{logs: &testkit.SyncBuffer{}}
	opts := controlOptions(nil, "collector-0", r)
	opts.Registerer = reg
	if _, err := NewControl(opts); err != nil {
		t.Fatal(err)
	}
	_, err := NewControl(opts)
	if err == nil || !strings.Contains(err.Error(), "tally_collector_control_link_up") {
		t.Fatalf("second link: %v", err)
	}
}
