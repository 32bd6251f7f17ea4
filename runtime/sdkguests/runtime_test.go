//go:build !wasip1

package sdkguests_test

// The Go test guests through the collector's own runtime: the ABI conformance
// suite, and the per-call cost a Go mapper pays in production.

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/conformance"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

func TestConformanceNoop(t *testing.T) {
	conformance.Run(t, guestWasm(t, "noop"), conformance.WithInputs(readFixture(t)), conformance.WithCacheDir(testkit.CacheDir(t)))
}

func TestConformanceSample(t *testing.T) {
	conformance.Run(t, guestWasm(t, "sample"), conformance.WithInputs(readFixture(t)), conformance.WithCacheDir(testkit.CacheDir(t)))
}

func benchRuntime(b *testing.B, guest string, parallel bool, opts ...runtime.ModuleOption) {
	ctx := context.Background()
	// A generous deadline: on a loaded machine a descheduled call must not
	// fail the benchmark.
	e, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(b),
		CallTimeout: 10 * time.Second, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	m, err := e.Load(ctx, guest+".wasm", guestWasm(b, guest), opts...)
	if err != nil {
		b.Fatal(err)
	}
	in := readFixture(b)
	src := runtime.Source{Exchange: "nova", RoutingKey: "notifications.info"}
	var x jsonindex.Index
	if err := x.Parse(in); err != nil {
		b.Fatal(err)
	}
	if _, err := m.Map(ctx, &x, src); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	if !parallel {
		reportCPU(b, func() {
			for b.Loop() {
				if _, err := m.Map(ctx, &x, src); err != nil {
					b.Fatal(err)
				}
			}
		})
		return
	}
	reportCPU(b, func() {
		testkit.BenchIndexedParallel(b, in, func(x *jsonindex.Index) error {
			_, err := m.Map(ctx, x, src)
			return err
		})
	})
}

// BenchmarkRuntime maps the ~2 KB compute.instance.exists through the
// collector's runtime: the no-op guest (the ABI round trip of a Go module)
// and the sample guest (a realistic Go mapping), with termination checks
// (guarded) and without, serial and parallel. The input is indexed once,
// outside the loop, as the pipeline does before routing.
func BenchmarkRuntime(b *testing.B) {
	for _, guest := range []string{"noop", "sample"} {
		for _, g := range []runtime.Guard{runtime.GuardNever, runtime.GuardWatched, runtime.GuardAlways} {
			b.Run(guest+"/"+g.String(), func(b *testing.B) { benchRuntime(b, guest, false, runtime.WithGuard(g)) })
			b.Run(guest+"/"+g.String()+"/parallel", func(b *testing.B) { benchRuntime(b, guest, true, runtime.WithGuard(g)) })
		}
	}
}

// reportCPU runs loop and reports its CPU time per b.N.
func reportCPU(b *testing.B, loop func()) {
	start := testkit.CPUTime()
	loop()
	testkit.ReportCPU(b, start)
}
