package catalog_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// TestMetricsRegisteredOnce: a second catalogue on the same registry is an
// error naming the metric, not a panic.
func TestMetricsRegisteredOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	eng := newEngine(t)
	newCatalog(t, catalog.Options{Engine: eng, Registerer: reg})
	c, err := catalog.New(context.Background(), catalog.Options{Engine: eng, Registerer: reg, Logger: testkit.Logger()})
	if err == nil {
		_ = c.Close(context.Background())
		t.Fatal("a second catalogue registered its metrics again")
	}
	if !strings.Contains(err.Error(), "tally_collector_mapper_") {
		t.Fatalf("error does not name the metric: %v", err)
	}
}
