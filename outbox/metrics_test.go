package outbox_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/outbox"
)

// TestMetricsRegisteredOnce: a second outbox on the same registry is an error
// naming the metric, and leaves the first one's metrics in place.
func TestMetricsRegisteredOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := outbox.Open(outbox.Options{Dir: t.TempDir(), Logger: zerolog.Nop(), MinFreeBytes: -1, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	o2, err := outbox.Open(outbox.Options{Dir: t.TempDir(), Logger: zerolog.Nop(), MinFreeBytes: -1, Registerer: reg})
	if err == nil {
		o2.Close()
		t.Fatal("a second outbox registered its metrics again")
	}
	if !strings.Contains(err.Error(), "tally_collector_outbox_full_total") {
		t.Fatalf("error does not name the metric: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "tally_collector_outbox_depth"
	}
	if !found {
		t.Fatal("the first outbox's metrics are gone")
	}
}
