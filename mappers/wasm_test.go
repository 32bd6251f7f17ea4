package mappers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// shared holds the engine and modules every test of the package uses: the
// modules are compiled once per test binary.
var shared struct {
	once sync.Once
	eng  *runtime.Engine
	mods map[string]*runtime.Module
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.eng != nil {
		_ = shared.eng.Close(context.Background())
	}
	os.Exit(code)
}

// loadBuiltin compiles every built-in module with a real engine, once. It
// ends the test when the modules were not built (make wasm).
func loadBuiltin(tb testing.TB) map[string]*runtime.Module {
	tb.Helper()
	builtinWasm(tb)
	shared.once.Do(func() { shared.mods, shared.err = compileBuiltin(testkit.CacheDir(tb)) })
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.mods
}

// builtinWasm returns the built-in modules (Builtin), and ends the test when
// they are not built (testkit.Missing) or cannot be read.
func builtinWasm(tb testing.TB) map[string][]byte {
	tb.Helper()
	wasm, err := Builtin()
	if errors.Is(err, ErrMissing) {
		testkit.Missing(tb, "the built-in mappers are not built: run make wasm (make build and make test build them)")
	}
	if err != nil {
		tb.Fatal(err)
	}
	return wasm
}

// meteredEngine returns an engine that runs modules as the daemon does by
// default (MAPPER_METERED: metered, unguarded), closed when the test ends;
// callTimeout 0 keeps the runtime's default.
func meteredEngine(tb testing.TB, callTimeout time.Duration) *runtime.Engine {
	tb.Helper()
	ctx := context.Background()
	eng, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(tb), CallTimeout: callTimeout, Metered: true, Logger: zerolog.Nop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = eng.Close(ctx) })
	return eng
}

func compileBuiltin(cacheDir string) (map[string]*runtime.Module, error) {
	wasm, err := Builtin()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	// TALLY_BENCH_CALL_TIMEOUT lengthens the deadline of a call, for
	// counting instructions under valgrind, which runs the code some fifty
	// times slower (docs/performance.md, "Method").
	timeout, _ := time.ParseDuration(os.Getenv("TALLY_BENCH_CALL_TIMEOUT"))
	eng, err := runtime.NewEngine(ctx, runtime.Config{
		CacheDir:    cacheDir,
		CallTimeout: timeout,
		Logger:      zerolog.Nop(),
	})
	if err != nil {
		return nil, err
	}
	shared.eng = eng
	mods := make(map[string]*runtime.Module, len(wasm))
	for name, b := range wasm {
		m, err := eng.Load(ctx, "builtin:"+name, b)
		if err != nil {
			return nil, err
		}
		mods[strings.TrimSuffix(name, ".wasm")] = m
	}
	for _, s := range services {
		if mods[s] == nil {
			return nil, fmt.Errorf("built-in module %s.wasm missing", s)
		}
	}
	return mods, nil
}

var testSource = runtime.Source{Exchange: "test-exchange", RoutingKey: "notifications.info"}

// mapWith returns a fixture.MapFunc that maps through the compiled module and
// checks the "source" the host filled in.
func mapWith(m *runtime.Module) fixture.MapFunc {
	return func(in []byte) ([]byte, error) {
		var idx jsonindex.Index
		if err := idx.Parse(in); err != nil {
			idx.SetRaw(in)
		}
		res, err := m.Map(context.Background(), &idx, testSource)
		var me *runtime.MapError
		if errors.As(err, &me) && me.Reason == runtime.ReasonInvalidEvent {
			// The collector keeps the notification as a dead letter.
			return fixture.HostDocument(res, err)
		}
		if err != nil {
			return nil, err
		}
		for _, ev := range res.Events {
			var e struct {
				Source struct {
					Exchange   string `json:"exchange"`
					RoutingKey string `json:"routing_key"`
					Mapper     string `json:"mapper"`
				} `json:"source"`
			}
			if err := json.Unmarshal(ev, &e); err != nil {
				return nil, fmt.Errorf("event %s: %w", ev, err)
			}
			if e.Source.Mapper != m.ID() || e.Source.Exchange != testSource.Exchange || e.Source.RoutingKey != testSource.RoutingKey {
				return nil, fmt.Errorf("event source %+v, want mapper %s and the call's source", e.Source, m.ID())
			}
		}
		return fixture.Document(res.Events), nil
	}
}

// TestBuiltinFixtures runs every fixture pair of every mapper through its
// compiled module: the same expected documents as the native tests.
func TestBuiltinFixtures(t *testing.T) {
	mods := loadBuiltin(t)
	for _, s := range services {
		t.Run(s, func(t *testing.T) {
			m := mods[s]
			results, err := fixture.Run(filepath.Join(s, "testdata"), mapWith(m), false)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range results {
				if r.Err != nil {
					t.Error(r.Err)
				}
				if et := eventType(t, r.Case.In); et != "" {
					if ok, _ := m.Manifest().Match(et); !ok {
						t.Errorf("%s: %s does not claim its own fixture type %q", r.Case.Name, m.ID(), et)
					}
				}
			}
		})
	}
}

// TestBuiltinHostile proves through the compiled modules what the native
// tests prove of the Go code: no input makes a mapper trap or fail.
func TestBuiltinHostile(t *testing.T) {
	mods := loadBuiltin(t)
	types := map[string]string{
		"nova": "compute.instance.exists", "cinder": "volume.attach.end", "neutron": "port.create.end",
		"glance": "image.upload", "octavia": "octavia.loadbalancer.create.end",
		"manila": "share.create.end", "designate": "dns.domain.create",
		"swift": "objectstore.http.request", "trove": "trove.instance.exists",
		"ironic": "baremetal.node.provision_set.end",
	}
	for _, s := range services {
		for _, in := range fixture.HostileInputs(types[s]) {
			_, err := mapWith(mods[s])(in)
			if err != nil {
				t.Errorf("%s on %q: %v", s, in, err)
			}
		}
	}
}

// TestBuiltinWorkedExample runs the example of docs/writing-mappers.md
// through the compiled octavia module.
func TestBuiltinWorkedExample(t *testing.T) {
	mods := loadBuiltin(t)
	results, err := fixture.Run(filepath.Join("testdata", "worked-example"), mapWith(mods["octavia"]), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			t.Error(r.Err)
		}
	}
}

// TestBuiltinUnclaimed checks that no built-in module claims the real samples
// of testdata/unclaimed (ceilometer's own types, neutron's firewall policies
// and rules, IPsec and IKE policies, LBaaS v1, metering, cinder capacity),
// nor a few other types left out on purpose (nova's volume.usage, which the
// volume.* glob would otherwise take); and that the claimed types go to the
// right module.
func TestBuiltinUnclaimed(t *testing.T) {
	mods := loadBuiltin(t)
	files, err := filepath.Glob(filepath.Join("testdata", "unclaimed", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no unclaimed samples: %v", err)
	}
	var types []string
	for _, f := range files {
		et := eventType(t, f)
		if et == "" {
			t.Fatalf("%s: no event_type", f)
		}
		types = append(types, et)
	}
	types = append(types, "image.member.create", "volume_type.create", "capacity.backend.foo",
		"compute_task.build_instances", "volume.usage", "port_forwarding.create.end",
		"octavia.listener.create.end", "scheduler.select_destinations.end",
		"dns.zone.create", "dns.zone.exists", "share_network.create.end", "dns.recordset.create",
		"objectstore.http.response", "dbaas.instance_create.start", "baremetal.port.create.end",
		"baremetal.chassis.update.end")
	sort.Strings(types)
	for _, et := range types {
		for name, m := range mods {
			if ok, _ := m.Manifest().Match(et); ok {
				t.Errorf("%s claims %q", name, et)
			}
		}
	}
	claimed := map[string]string{
		"compute.instance.create.error":                 "nova",
		"compute.instance.live_migration.post.dest.end": "nova",
		"instance.exists":                               "nova",
		"instance.resize_finish.end":                    "nova",
		"volume.transfer.accept.end":                    "cinder",
		"snapshot.exists":                               "cinder",
		"floatingip.update.end":                         "neutron",
		"router.interface.create":                       "neutron",
		"image.send":                                    "glance",
		"octavia.loadbalancer.delete.end":               "octavia",
		"backup.create.end":                             "cinder",
		"firewall_group.delete.end":                     "neutron",
		"ipsec_site_connection.create.end":              "neutron",
		"share.extend.end":                              "manila",
		"share_snapshot.delete.end":                     "manila",
		"dns.domain.update":                             "designate",
		"dns.zone.touch":                                "designate",
		"objectstore.http.request":                      "swift",
		"trove.instance.modify_volume":                  "trove",
		"baremetal.node.power_state_corrected.success":  "ironic",
	}
	for et, want := range claimed {
		for name, m := range mods {
			ok, _ := m.Manifest().Match(et)
			if ok != (name == want) {
				t.Errorf("%s claims %q: %v, want %v", name, et, ok, name == want)
			}
		}
	}
}

func eventType(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var m struct {
		EventType string `json:"event_type"`
	}
	_ = json.Unmarshal(b, &m)
	return m.EventType
}

// BenchmarkBuiltinNovaExists maps the 2.5 KB compute.instance.exists of
// mappers/nova/testdata through the compiled nova module, indexing the JSON
// on every iteration as the pipeline does once per message. Compare with
// BenchmarkNovaExists in mappers/nova (native). The sub-benchmarks load the
// module guarded (the runtime's default) and unguarded (runtime.GuardNever,
// what GuardUntrusted becomes after its trial calls).
func BenchmarkBuiltinNovaExists(b *testing.B) {
	loadBuiltin(b)
	wasm := builtinWasm(b)
	in, err := os.ReadFile(filepath.Join("nova", "testdata", "edge__exists_2024_1.in.json"))
	if err != nil {
		b.Fatal(err)
	}
	for _, g := range []runtime.Guard{runtime.GuardAlways, runtime.GuardWatched, runtime.GuardNever} {
		b.Run("guard="+g.String(), func(b *testing.B) {
			benchmarkMap(b, shared.eng, g, "nova.wasm", wasm["nova.wasm"], in)
		})
	}
}

// benchmarkMap loads the built-in module name on eng with the guard g and
// maps in, which yields one event, on every iteration, parsing it first as
// the pipeline does once per message. It reports the allocations and the
// CPU time per iteration.
func benchmarkMap(b *testing.B, eng *runtime.Engine, g runtime.Guard, name string, module, in []byte) {
	ctx := context.Background()
	m, err := eng.Load(ctx, "builtin:"+name, module, runtime.WithGuard(g))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(ctx)
	b.SetBytes(int64(len(in)))
	testkit.BenchIndexed(b, in, func(idx *jsonindex.Index) error {
		res, err := m.Map(ctx, idx, testSource)
		if err != nil || len(res.Events) != 1 {
			return fmt.Errorf("events %d, err %w", len(res.Events), err)
		}
		return nil
	})
}

// benchInputs are the inputs of the per-module benchmarks, the same as the
// native Benchmark<Module> of each module's package (the channel module's
// native benchmark maps a smaller message of its own). Each is a whole
// notification, message_id included, as a delivery is: the host refuses an
// event without an event_id (TestBenchInputs).
var benchInputs = []struct{ name, module, file string }{
	{"nova", "nova", "edge__exists_2024_1"},
	{"nova-versioned", "nova", "edge__versioned_later_version"},
	{"cinder", "cinder", "volume.create.end__ceilometer__1"},
	{"neutron", "neutron", "port.create.end__ceilometer__1"},
	{"glance", "glance", "image.upload__ceilometer__2"},
	{"octavia", "octavia", "octavia.loadbalancer.create.end__octavia__1"},
	{"manila", "manila", "share.extend.end__manila__2"},
	{"designate", "designate", "dns.domain.update__designate__2"},
	{"swift", "swift", "objectstore.http.request__ceilometermiddleware__1"},
	{"trove", "trove", "trove.instance.create__trove__1"},
	{"ironic", "ironic", "edge__node_later_version"},
	{"channel", "channel", "usage__json_full"},
}

// TestBenchInputs: every input of BenchmarkBuiltin maps, through its module
// metered as the daemon runs it, to the one event its benchmark counts on:
// a benchmark whose first call fails measures nothing.
func TestBenchInputs(t *testing.T) {
	wasm := builtinWasm(t)
	ctx := context.Background()
	metered := meteredEngine(t, 0)
	covered := map[string]bool{}
	for _, bi := range benchInputs {
		covered[bi.module] = true
		in, err := os.ReadFile(filepath.Join(bi.module, "testdata", bi.file+fixture.InSuffix))
		if err != nil {
			t.Fatal(err)
		}
		m, err := metered.Load(ctx, "builtin:"+bi.module+".wasm", wasm[bi.module+".wasm"], runtime.WithGuard(runtime.GuardNever))
		if err != nil {
			t.Fatal(err)
		}
		var idx jsonindex.Index
		if err := idx.Parse(in); err != nil {
			t.Fatal(err)
		}
		if res, err := m.Map(ctx, &idx, testSource); err != nil || len(res.Events) != 1 {
			t.Errorf("%s (%s): %d events, err %v; want one event", bi.name, bi.file, len(res.Events), err)
		}
		_ = m.Close(ctx)
	}
	for _, s := range services {
		if !covered[s] {
			t.Errorf("no benchmark input for %s", s)
		}
	}
}

// BenchmarkBuiltin maps one input per module through its compiled module,
// indexing the JSON on every iteration as the pipeline does once per
// message: metered is how the daemon runs every module by default
// (MAPPER_METERED: metered, unguarded), guard=watched how it runs built-in
// modules unmetered, guard=always with termination checks compiled in,
// guard=never the same code without them.
// Compare each with the native benchmark of the module's package;
// docs/performance.md has the figures.
func BenchmarkBuiltin(b *testing.B) {
	loadBuiltin(b)
	wasm := builtinWasm(b)
	// The metered engine runs the modules as the daemon does by default:
	// metered and unguarded (mode "metered").
	timeout, _ := time.ParseDuration(os.Getenv("TALLY_BENCH_CALL_TIMEOUT"))
	metered := meteredEngine(b, timeout)
	modes := []struct {
		name string
		eng  *runtime.Engine
		g    runtime.Guard
	}{
		{"guard=never", shared.eng, runtime.GuardNever},
		{"guard=watched", shared.eng, runtime.GuardWatched},
		{"guard=always", shared.eng, runtime.GuardAlways},
		{"metered", metered, runtime.GuardNever},
	}
	for _, bi := range benchInputs {
		in, err := os.ReadFile(filepath.Join(bi.module, "testdata", bi.file+fixture.InSuffix))
		if err != nil {
			b.Fatal(err)
		}
		for _, mode := range modes {
			b.Run(bi.name+"/"+mode.name, func(b *testing.B) {
				benchmarkMap(b, mode.eng, mode.g, bi.module+".wasm", wasm[bi.module+".wasm"], in)
			})
		}
	}
}

// TestBuiltinWithinMinMemory: at MinMemoryLimitMiB, the least memory the
// settings accept, every built-in module instantiates and maps each of its
// fixtures to the expected events, and its largest fixture grown to near the
// 1 MiB body limit (a member no mapper reads) without failing.
func TestBuiltinWithinMinMemory(t *testing.T) {
	wasm := builtinWasm(t)
	ctx := context.Background()
	eng, err := runtime.NewEngine(ctx, runtime.Config{
		CacheDir:    testkit.CacheDir(t),
		MemoryLimit: MinMemoryLimitMiB << 20,
		CallTimeout: 10 * time.Second, // memory is under test here, not time
		PoolSize:    1,
		Logger:      zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(ctx) })
	for _, s := range services {
		t.Run(s, func(t *testing.T) {
			m, err := eng.Load(ctx, "builtin:"+s+".wasm", wasm[s+".wasm"])
			if err != nil {
				t.Fatalf("load at %d MiB: %v", MinMemoryLimitMiB, err)
			}
			dir := filepath.Join(s, "testdata")
			results, err := fixture.Run(dir, mapWith(m), false)
			if err != nil {
				t.Fatal(err)
			}
			largest := ""
			var size int64
			for _, r := range results {
				if r.Err != nil {
					t.Errorf("at %d MiB: %v", MinMemoryLimitMiB, r.Err)
				}
				if fi, err := os.Stat(r.Case.In); err == nil && fi.Size() > size {
					largest, size = r.Case.In, fi.Size()
				}
			}
			if largest == "" {
				t.Fatalf("no fixture in %s", dir)
			}
			b, err := os.ReadFile(largest)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatalf("%s: %v", largest, err)
			}
			doc["x_padding"] = strings.Repeat("x", 1<<20-len(b)-64)
			big, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			if len(big) > 1<<20 {
				t.Fatalf("the grown input is %d bytes, over the 1 MiB body limit", len(big))
			}
			if _, err := mapWith(m)(big); err != nil {
				t.Errorf("%s grown to %d bytes, at %d MiB: %v", filepath.Base(largest), len(big), MinMemoryLimitMiB, err)
			}
		})
	}
}
