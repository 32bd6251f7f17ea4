package catalog_test

import (
	"context"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// BenchmarkRoute is the hot-path lookup (answered from the snapshot's cache).
func BenchmarkRoute(b *testing.B) {
	dir := b.TempDir()
	drop(b, dir, "special.wasm", "special")
	c := newCatalog(b, catalog.Options{Builtin: map[string][]byte{"echo.wasm": wasm(b, "echo_v1")}, Dir: dir})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := c.Route("test.special"); !ok {
				b.Fatal("unrouted")
			}
		}
	})
}

// BenchmarkProcess compares a message mapped by the active module alone with
// one mapped during a migration (the candidate runs too, and the outputs are
// compared).
func BenchmarkProcess(b *testing.B) {
	for _, shadow := range []bool{false, true} {
		name := "active"
		if shadow {
			name = "shadow"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			drop(b, dir, "echo.wasm", "echo_v1")
			c := newCatalog(b, catalog.Options{Dir: dir})
			if shadow {
				drop(b, dir, "echo.wasm", "echo_v1b")
				reload(b, c)
			}
			p := newPipeline(c)
			msg := pipeline.Message{Body: body("test.a", "m1"), Exchange: "test", RoutingKey: "notifications.info"}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if r := p.Process(ctx, msg); r.Outcome != pipeline.Mapped {
					b.Fatal(r.Reason, r.Err)
				}
			}
		})
	}
}
