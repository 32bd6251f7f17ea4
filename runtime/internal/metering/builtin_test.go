package metering_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tetratelabs/wazero"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/mappers"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	"github.com/tally-billing/tally-openstack-collector/runtime/internal/metering"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// pair is a built-in module loaded as built and metered.
type pair struct {
	name           string
	plain, metered *runtime.Module
}

var builtins struct {
	once  sync.Once
	eng   *runtime.Engine
	pairs []pair
	err   error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtins.eng != nil {
		_ = builtins.eng.Close(context.Background())
	}
	os.Exit(code)
}

// builtinWasm answers the built-in modules by file name; without them
// (not built) the test or benchmark stops as testkit.Missing says.
func builtinWasm(tb testing.TB) map[string][]byte {
	tb.Helper()
	wasm, err := mappers.Builtin()
	if errors.Is(err, mappers.ErrMissing) {
		testkit.Missing(tb, "the built-in mappers are not built: run make wasm (make build and make test build them)")
	}
	if err != nil {
		tb.Fatal(err)
	}
	return wasm
}

// loadBuiltins loads every built-in module twice, as built and metered with
// a budget that never runs out, once per test binary.
func loadBuiltins(tb testing.TB) []pair {
	tb.Helper()
	builtinWasm(tb)
	cache := testkit.CacheDir(tb)
	builtins.once.Do(func() { builtins.pairs, builtins.err = compileBuiltins(cache) })
	if builtins.err != nil {
		tb.Fatal(builtins.err)
	}
	return builtins.pairs
}

func compileBuiltins(cacheDir string) ([]pair, error) {
	wasm, err := mappers.Builtin()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	eng, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: cacheDir, Logger: zerolog.Nop()})
	if err != nil {
		return nil, err
	}
	builtins.eng = eng
	var pairs []pair
	for _, file := range slices.Sorted(maps.Keys(wasm)) {
		p := pair{name: strings.TrimSuffix(file, ".wasm")}
		if p.plain, err = eng.Load(ctx, "builtin:"+file, wasm[file]); err != nil {
			return nil, err
		}
		m, err := metering.Meter(wasm[file], metering.Options{Initial: math.MaxInt64})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if p.metered, err = eng.Load(ctx, "builtin:"+file, m); err != nil {
			return nil, err
		}
		pairs = append(pairs, p)
	}
	return pairs, nil
}

var src = runtime.Source{Exchange: "test-exchange", RoutingKey: "notifications.info"}

// outcome is everything a call answers, for comparing two modules.
func outcome(m *runtime.Module, in []byte) string {
	var idx jsonindex.Index
	if err := idx.Parse(in); err != nil {
		idx.SetRaw(in)
	}
	res, err := m.Map(context.Background(), &idx, src)
	var b bytes.Buffer
	fmt.Fprintf(&b, "err=%v oversize=%d dropped=%v\n", err, res.Oversize, res.Dropped)
	for _, ev := range res.Events {
		b.Write(ev)
		b.WriteByte('\n')
	}
	return b.String()
}

// corpus answers the fixture inputs of every built-in mapper.
func corpus(tb testing.TB) map[string][]byte {
	tb.Helper()
	return testkit.ReadGlob(tb, testkit.RepoPath(tb, "mappers", "*", "testdata", "*"+fixture.InSuffix))
}

// TestBuiltinParity: every built-in module, metered, maps every fixture
// input of every mapper to byte-identical events, or fails the same way.
func TestBuiltinParity(t *testing.T) {
	pairs := loadBuiltins(t)
	in := corpus(t)
	for _, p := range pairs {
		t.Run(p.name, func(t *testing.T) {
			for path, b := range in {
				if got, want := outcome(p.metered, b), outcome(p.plain, b); got != want {
					t.Errorf("%s: metered\n%s\nunmetered\n%s", path, got, want)
				}
			}
		})
	}
}

// FuzzBuiltinParity: on any input, every built-in module answers the same
// metered as unmetered.
func FuzzBuiltinParity(f *testing.F) {
	for _, b := range corpus(f) {
		f.Add(b)
	}
	pairs := loadBuiltins(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, p := range pairs {
			if got, want := outcome(p.metered, in), outcome(p.plain, in); got != want {
				t.Fatalf("%s: metered\n%s\nunmetered\n%s", p.name, got, want)
			}
		}
	})
}

// FuzzMeter: the pass never panics; from a module wazero accepts it makes
// one wazero accepts, or refuses it; from one wazero rejects it never makes
// one wazero accepts (a module must not gain access to its budget).
func FuzzMeter(f *testing.F) {
	for _, pattern := range []string{
		filepath.Join("testdata", "*.wasm"),
		testkit.RepoPath(f, "runtime", "testdata", "*.wasm"),
		testkit.RepoPath(f, "wasm-sdk", "testdata", "*.wasm"),
	} {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add(module([]byte{0, 0x0b}, ""))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	valid := func(b []byte) error {
		cm, err := rt.CompileModule(ctx, b)
		if err == nil {
			_ = cm.Close(ctx)
		}
		return err
	}
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, err := metering.Meter(wasm, metering.Options{Initial: 1 << 20})
		if err != nil {
			if !errors.Is(err, metering.ErrUnsupported) {
				t.Fatalf("error %v does not wrap ErrUnsupported", err)
			}
			return
		}
		inErr, outErr := valid(wasm), valid(out)
		if inErr == nil && outErr != nil {
			t.Fatalf("the input validates, the metered module does not: %v", outErr)
		}
		if inErr != nil && outErr == nil {
			t.Fatalf("the input does not validate (%v), the metered module does", inErr)
		}
	})
}

// BenchmarkNovaExists maps the 2.5 KB compute.instance.exists through the
// nova module, indexing the JSON on every iteration as the pipeline does:
// as built under each guard that bounds runaways today, and metered
// (runtime.Config.Metered) without wazero's termination checks.
// docs/performance.md, "Metering", has the figures.
func BenchmarkNovaExists(b *testing.B) {
	wasm := builtinWasm(b)
	in, err := os.ReadFile(testkit.RepoPath(b, "mappers", "nova", "testdata", "edge__exists_2024_1"+fixture.InSuffix))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []benchMode{
		{"never", false, runtime.GuardNever},
		{"watched", false, runtime.GuardWatched},
		{"always", false, runtime.GuardAlways},
		{"metered", true, runtime.GuardNever},
	} {
		b.Run("mode="+c.mode, func(b *testing.B) {
			benchMap(b, runtime.Config{CallTimeout: benchCallTimeout()}, c, wasm, "nova", in)
		})
	}
}

// BenchmarkBuiltinModes maps one input of each built-in module but nova's
// (BenchmarkNovaExists; nova-versioned is nova's module on a versioned
// notification), the inputs of the mappers package's BenchmarkBuiltin, indexing included,
// watched (how built-in modules ran a first delivery before metering) and
// metered without termination checks (how every module runs by default):
// one module per engine, so that under valgrind only that module's
// _initialize runs. docs/performance.md, "Metering", has the figures.
func BenchmarkBuiltinModes(b *testing.B) {
	wasm := builtinWasm(b)
	for _, in := range []struct{ name, module, file string }{
		{"manila", "manila", "share.extend.end__manila__2"},
		{"neutron", "neutron", "port.create.end__ceilometer__1"},
		{"glance", "glance", "image.upload__ceilometer__2"},
		{"swift", "swift", "objectstore.http.request__ceilometermiddleware__1"},
		{"octavia", "octavia", "octavia.loadbalancer.create.end__octavia__1"},
		{"cinder", "cinder", "volume.create.end__ceilometer__1"},
		{"ironic", "ironic", "edge__node_later_version"},
		{"designate", "designate", "dns.domain.update__designate__2"},
		{"trove", "trove", "trove.instance.create__trove__1"},
		{"nova-versioned", "nova", "edge__versioned_later_version"},
		{"channel", "channel", "usage__json_full"},
	} {
		body, err := os.ReadFile(testkit.RepoPath(b, "mappers", in.module, "testdata", in.file+fixture.InSuffix))
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range []benchMode{
			{"watched", false, runtime.GuardWatched},
			{"metered", true, runtime.GuardNever},
		} {
			b.Run("module="+in.name+"/mode="+c.mode, func(b *testing.B) {
				benchMap(b, runtime.Config{CallTimeout: benchCallTimeout(), PoolSize: 1}, c, wasm, in.module, body)
			})
		}
	}
}

// benchMode is how the benchmarks run a built-in module: as built under a
// guard, or metered (runtime.Config.Metered).
type benchMode struct {
	mode    string
	metered bool
	guard   runtime.Guard
}

// benchCallTimeout is TALLY_BENCH_CALL_TIMEOUT, which lengthens the deadline
// of a call for counting instructions under valgrind; 0 (the engine's
// default) when it is not set.
func benchCallTimeout() time.Duration {
	timeout, _ := time.ParseDuration(os.Getenv("TALLY_BENCH_CALL_TIMEOUT"))
	return timeout
}

// benchMap loads the built-in module of that name from wasm into an engine
// of its own, configured by cfg and run as c says, and maps in through it in
// b.Loop, indexing the JSON on every iteration as the pipeline does; every
// call must answer one event.
func benchMap(b *testing.B, cfg runtime.Config, c benchMode, wasm map[string][]byte, module string, in []byte) {
	ctx := context.Background()
	cfg.CacheDir, cfg.Metered, cfg.Logger = testkit.CacheDir(b), c.metered, zerolog.Nop()
	eng, err := runtime.NewEngine(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	m, err := eng.Load(ctx, "builtin:"+module+".wasm", wasm[module+".wasm"], runtime.WithGuard(c.guard))
	if err != nil {
		b.Fatal(err)
	}
	testkit.BenchIndexed(b, in, func(idx *jsonindex.Index) error {
		res, err := m.Map(ctx, idx, src)
		if err != nil || len(res.Events) != 1 {
			return fmt.Errorf("events %d, err %w", len(res.Events), err)
		}
		return nil
	})
}
