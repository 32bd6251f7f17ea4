package catalog_test

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/mappers"
	"github.com/tally-billing/tally-openstack-collector/runtime"

	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// BenchmarkRoute is the hot-path lookup (answered from the snapshot's cache).
func BenchmarkRoute(b *testing.B) {
	_, c, _ := catalogOn(b, catalog.Options{Builtin: map[string][]byte{"echo.wasm": wasm(b, "echo_v1")}}, "special.wasm", "special")
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
			dir, c, p := catalogOn(b, catalog.Options{}, "echo.wasm", "echo_v1")
			if shadow {
				drop(b, dir, "echo.wasm", "echo_v1b")
				reload(b, c)
			}
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

// BenchmarkBuiltinFirstUse is the latency of the first notification a
// built-in module claims (guarded): the catalogue starts with every built-in module
// known by its stored manifest (warm compilation cache), and the first nova
// notification loads nova (its code from the cache, a first instance) and
// maps. "start" is the catalogue's start with every built-in module, warm.
func BenchmarkBuiltinFirstUse(b *testing.B) {
	ctx := context.Background()
	builtin, err := mappers.Builtin()
	if err != nil {
		b.Fatal(err)
	}
	msg := pipeline.Message{Body: testkit.ReadFile(b, "../../mappers/nova/testdata/edge__exists_2024_1.in.json"), Exchange: "nova"}
	newEngineAndCatalog := func(b *testing.B) (*runtime.Engine, *catalog.Catalog) {
		eng, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(b), Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		c, err := catalog.New(ctx, catalog.Options{Engine: eng, Builtin: builtin, Logger: zerolog.Nop(),
			BuiltinOptions: []runtime.ModuleOption{runtime.WithGuard(runtime.GuardAlways)}})
		if err != nil {
			b.Fatal(err)
		}
		return eng, c
	}
	eng, c := newEngineAndCatalog(b) // fills the caches
	_ = c.Close(ctx)
	_ = eng.Close(ctx)
	b.Run("start", func(b *testing.B) {
		for b.Loop() {
			eng, c := newEngineAndCatalog(b)
			b.StopTimer()
			_ = c.Close(ctx)
			_ = eng.Close(ctx)
			b.StartTimer()
		}
	})
	b.Run("first-nova-notification", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			eng, c := newEngineAndCatalog(b)
			p := newPipeline(c)
			b.StartTimer()
			if r := p.Process(ctx, msg); r.Outcome != pipeline.Mapped {
				b.Fatalf("outcome %v %q %v", r.Outcome, r.Reason, r.Err)
			}
			b.StopTimer()
			_ = c.Close(ctx)
			_ = eng.Close(ctx)
			b.StartTimer()
		}
	})
	b.Run("next-nova-notification", func(b *testing.B) {
		eng, c := newEngineAndCatalog(b)
		defer eng.Close(ctx)
		defer c.Close(ctx)
		p := newPipeline(c)
		p.Process(ctx, msg)
		for b.Loop() {
			if r := p.Process(ctx, msg); r.Outcome != pipeline.Mapped {
				b.Fatalf("outcome %v %q %v", r.Outcome, r.Reason, r.Err)
			}
		}
	})
}
