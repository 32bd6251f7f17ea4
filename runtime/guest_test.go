package runtime_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

const (
	goNoop = "wasm-sdk/testdata/noop.wasm" // the SDK's no-op Go guest
	goNova = "mappers/dist/nova.wasm"      // the built-in nova mapper
	novaIn = "testdata/nova-compute.instance.exists.json"
)

// TestGoGuestMemoryFlat runs a Go guest (virtual clocks) for 110k calls on one
// instance and checks its linear memory does not grow between 10k and 110k
// calls: the guest's garbage collector keeps up.
func TestGoGuestMemoryFlat(t *testing.T) {
	wasm := guest(t, goNoop)
	if testing.Short() {
		t.Skip("long-running")
	}
	e := newEngine(t, runtime.Config{PoolSize: 1, MemoryLimit: 32 << 20})
	m, err := e.Load(context.Background(), goNoop, wasm, runtime.WithGuard(runtime.GuardNever))
	if err != nil {
		t.Fatal(err)
	}
	var x jsonindex.Index
	if err := x.Parse(testkit.ReadFile(t, novaIn)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var at10k uint32
	start := time.Now()
	for i := 1; i <= 110_000; i++ {
		if _, err := m.Map(ctx, &x, src); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if i == 10_000 {
			at10k = runtime.MemorySize(m)
		}
	}
	end := runtime.MemorySize(m)
	t.Logf("guest memory: %d KiB after 10k calls, %d KiB after 110k (%v)", at10k>>10, end>>10, time.Since(start))
	if end != at10k {
		t.Fatalf("guest memory grew from %d to %d bytes between 10k and 110k calls", at10k, end)
	}
	if m.Instances() != 1 {
		t.Fatalf("instances = %d", m.Instances())
	}
}

// TestGoGuestEndlessCallTimeout: a real Go guest is guarded by default.
func TestGoNovaMaps(t *testing.T) {
	wasm := guest(t, goNova)
	e := newEngine(t, runtime.Config{})
	m, err := e.Load(context.Background(), goNova, wasm)
	if err != nil {
		t.Fatal(err)
	}
	var x jsonindex.Index
	if err := x.Parse(testkit.ReadFile(t, novaIn)); err != nil {
		t.Fatal(err)
	}
	res, err := m.Map(context.Background(), &x, src)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 1 || !contains(string(res.Events[0]), `"mapper":"`+m.ID()+`"`) {
		t.Fatalf("events = %s", res.Events)
	}
	t.Logf("%s", res.Events[0])
}

func benchModule(b *testing.B, wasm []byte, name string, in []byte, guard runtime.Guard) {
	e := newEngine(b, runtime.Config{CallTimeout: 10 * time.Second}) // cost, not limits

	m, err := e.Load(context.Background(), name, wasm, runtime.WithGuard(guard))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		var x jsonindex.Index
		if err := x.Parse(in); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		cpu0 := testkit.CPUTime()
		for b.Loop() {
			if _, err := m.Map(ctx, &x, src); err != nil {
				b.Fatal(err)
			}
		}
		// CPU time of the process per call: on a busy machine wall time per
		// call says more about the neighbours than about the call.
		testkit.ReportCPU(b, cpu0)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		testkit.BenchIndexedParallel(b, in, func(x *jsonindex.Index) error {
			_, err := m.Map(ctx, x, src)
			return err
		})
	})
}

var guards = []runtime.Guard{runtime.GuardNever, runtime.GuardAlways, runtime.GuardWatched}

// BenchmarkMap: the ABI round trip (WAT and Go no-op guests) and the nova
// mapping, guarded and unguarded.
func BenchmarkMap(b *testing.B) {
	nova := testkit.ReadFile(b, novaIn)
	for _, g := range guards {
		b.Run("wat-noop/guard="+g.String(), func(b *testing.B) { benchModule(b, wat(b, "noop"), "noop", nova, g) })
		b.Run("wat-fieldmap/guard="+g.String(), func(b *testing.B) { benchModule(b, wat(b, "fieldmap"), "fieldmap", nova, g) })
		if w, err := os.ReadFile("../" + goNoop); err == nil {
			b.Run("go-noop/guard="+g.String(), func(b *testing.B) { benchModule(b, w, goNoop, nova, g) })
		}
		if w, err := os.ReadFile("../" + goNova); err == nil {
			b.Run("go-nova/guard="+g.String(), func(b *testing.B) { benchModule(b, w, goNova, nova, g) })
		}
	}
}

// BenchmarkLoad: cold compile (fresh cache dir each time) and warm start (from
// the on-disk cache) of the built-in modules.
func BenchmarkLoad(b *testing.B) {
	mods := map[string]string{"go-noop": goNoop, "go-nova": goNova}
	for name, p := range mods {
		w, err := os.ReadFile("../" + p)
		if err != nil {
			continue
		}
		b.Run(name+"/cold", func(b *testing.B) {
			cpu0, n := testkit.CPUTime(), 0
			defer func() { b.ReportMetric(float64(testkit.CPUTime()-cpu0)/float64(n)/1e6, "cpu-ms/op") }()
			for b.Loop() {
				n++
				e := newEngine(b, runtime.Config{CacheDir: b.TempDir()})
				if _, err := e.Load(context.Background(), p, w); err != nil {
					b.Fatal(err)
				}
				_ = e.Close(context.Background())
			}
		})
		dir := b.TempDir()
		e := newEngine(b, runtime.Config{CacheDir: dir})
		if _, err := e.Load(context.Background(), p, w); err != nil {
			b.Fatal(err)
		}
		_ = e.Close(context.Background())
		b.Run(name+"/warm", func(b *testing.B) {
			cpu0, n := testkit.CPUTime(), 0
			defer func() { b.ReportMetric(float64(testkit.CPUTime()-cpu0)/float64(n)/1e6, "cpu-ms/op") }()
			for b.Loop() {
				n++
				e := newEngine(b, runtime.Config{CacheDir: dir})
				if _, err := e.Load(context.Background(), p, w); err != nil {
					b.Fatal(err)
				}
				_ = e.Close(context.Background())
			}
		})
	}
}

// BenchmarkInstanceMemory reports the linear memory of one instance after a
// nova mapping (resident guest memory per instance).
func BenchmarkInstanceMemory(b *testing.B) {
	for name, p := range map[string]string{"go-noop": goNoop, "go-nova": goNova} {
		w, err := os.ReadFile("../" + p)
		if err != nil {
			continue
		}
		b.Run(name, func(b *testing.B) {
			e := newEngine(b, runtime.Config{PoolSize: 1})
			m, err := e.Load(context.Background(), p, w)
			if err != nil {
				b.Fatal(err)
			}
			var x jsonindex.Index
			_ = x.Parse(testkit.ReadFile(b, novaIn))
			for b.Loop() {
				if _, err := m.Map(context.Background(), &x, src); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(runtime.MemorySize(m))/(1<<20), "MiB/instance")

			// Process RSS growth for 8 more instances (linear memory, stacks and
			// wazero's bookkeeping together).
			const extra = 8
			e2 := newEngine(b, runtime.Config{PoolSize: extra})
			m2, err := e2.Load(context.Background(), p, w)
			if err != nil {
				b.Fatal(err)
			}
			before := rss()
			runtime.Grow(b, m2, extra, &x, src)
			b.ReportMetric(float64(rss()-before)/extra/(1<<20), "rss-MiB/instance")
		})
	}
}

// rss returns the resident set size of the process in bytes (Linux).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res int64
	fmt.Sscan(string(b), &size, &res)
	return res * int64(os.Getpagesize())
}

// BenchmarkBuiltinNovaIndexed: the built-in nova module maps the 1.6 KB
// compute.instance.exists, the input indexed again for every call as the
// pipeline does (so the lookups find no table of an earlier call), watched
// and unguarded, with only this module loaded. TALLY_BENCH_CALL_TIMEOUT
// lengthens the deadline of a call, for counting instructions under
// valgrind (docs/performance.md).
func BenchmarkBuiltinNovaIndexed(b *testing.B) {
	w := guest(b, goNova)
	in := testkit.ReadFile(b, novaIn)
	timeout, _ := time.ParseDuration(os.Getenv("TALLY_BENCH_CALL_TIMEOUT"))
	e := newEngine(b, runtime.Config{CallTimeout: timeout})
	for _, g := range []runtime.Guard{runtime.GuardWatched, runtime.GuardNever} {
		b.Run("guard="+g.String(), func(b *testing.B) {
			m, err := e.Load(context.Background(), goNova, w, runtime.WithGuard(g))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			var x jsonindex.Index
			b.ReportAllocs()
			cpu0 := testkit.CPUTime()
			for b.Loop() {
				if err := x.Parse(in); err != nil {
					b.Fatal(err)
				}
				res, err := m.Map(context.Background(), &x, src)
				if err != nil || len(res.Events) != 1 {
					b.Fatalf("events %d, err %v", len(res.Events), err)
				}
			}
			testkit.ReportCPU(b, cpu0)
		})
	}
}
