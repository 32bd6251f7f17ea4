package plog

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// TestMetricsRegisteredOnce: a second server on the same registry is an
// error naming the metric.
func TestMetricsRegisteredOnce(t *testing.T) {
	box, err := outbox.Open(outbox.Options{Dir: t.TempDir(), MinFreeBytes: -1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	reg := prometheus.NewRegistry()
	opts := func() Options {
		return Options{
			Listeners: []Listener{{Network: UDP, Address: "127.0.0.1:0"}},
			Processor: &gate{p: newPipeline(t)}, Outbox: box, Registerer: reg, Logger: zerolog.Nop(), Version: "test",
		}
	}
	s1, err := New(opts())
	if err != nil {
		t.Fatal(err)
	}
	defer s1.closeSockets()
	s2, err := New(opts())
	if err == nil {
		s2.closeSockets()
		t.Fatal("a second server registered its metrics again")
	}
	if !strings.Contains(err.Error(), "tally_collector_plog_") {
		t.Fatalf("error does not name the metric: %v", err)
	}
}

func newPipeline(t *testing.T) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.New(pipeline.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
