package catalog_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

func gatherLazy(t testing.TB, reg *prometheus.Registry) (compiled, ok, failed float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "tally_collector_mapper_builtins_compiled":
				compiled = m.GetGauge().GetValue()
			case "tally_collector_mapper_builtin_compiles_total":
				switch m.GetLabel()[0].GetValue() {
				case "ok":
					ok = m.GetCounter().GetValue()
				case "error":
					failed = m.GetCounter().GetValue()
				}
			}
		}
	}
	return compiled, ok, failed
}

// TestBuiltinCompiledOnFirstUse: a built-in module is known by its manifest
// only; it is compiled when the first notification it claims arrives, and
// the one nothing claimed yet stays uncompiled.
func TestBuiltinCompiledOnFirstUse(t *testing.T) {
	reg := prometheus.NewRegistry()
	eng := newEngine(t)
	c := newCatalog(t, catalog.Options{Engine: eng, Registerer: reg, Builtin: map[string][]byte{
		"echo.wasm": wasm(t, "echo_v1"), "special.wasm": wasm(t, "special"),
	}})
	if n := eng.Loaded(); n != 0 {
		t.Fatalf("%d modules loaded before any notification, want 0", n)
	}
	for _, name := range []string{"echo", "special"} {
		if m := mustModule(t, c, name); m.Active.Compiled || m.Active.ID == "" || len(m.Active.EventTypes) == 0 {
			t.Errorf("%s before use: %+v", name, m.Active)
		}
	}
	if got, _, _ := gatherLazy(t, reg); got != 0 {
		t.Errorf("builtins_compiled = %v before use", got)
	}
	// Routing needs no module: the manifests decide.
	if r, ok := c.Route("test.special"); !ok || r.ID() != "special@1.0.0" {
		t.Fatalf("route test.special: %v %v", r, ok)
	}
	if n := eng.Loaded(); n != 0 {
		t.Fatalf("%d modules loaded after routing only, want 0", n)
	}

	p := newPipeline(c)
	if ev := mapOne(t, p, "test.special", "m1"); ev.Source.Mapper != "special@1.0.0" || ev.Variant != "special" {
		t.Fatalf("first notification: %+v", ev)
	}
	if ev := mapOne(t, p, "test.special", "m2"); ev.Source.Mapper != "special@1.0.0" {
		t.Fatalf("second notification: %+v", ev)
	}
	if n := eng.Loaded(); n != 1 {
		t.Fatalf("%d modules loaded, want 1 (special)", n)
	}
	if m := mustModule(t, c, "special"); !m.Active.Compiled {
		t.Error("special not shown compiled after its first notification")
	}
	if m := mustModule(t, c, "echo"); m.Active.Compiled {
		t.Error("echo shown compiled, but nothing it claims arrived")
	}
	if compiled, ok, failed := gatherLazy(t, reg); compiled != 1 || ok != 1 || failed != 0 {
		t.Errorf("builtins_compiled %v, compiles ok %v error %v; want 1, 1, 0", compiled, ok, failed)
	}
}

// TestBuiltinFirstUseConcurrent: many first calls at once compile the module
// once; all of them are mapped by it. Run with -race.
func TestBuiltinFirstUseConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	eng := newEngine(t)
	c := newCatalog(t, catalog.Options{Engine: eng, Registerer: reg, Builtin: map[string][]byte{"echo.wasm": wasm(t, "echo_v1")}})
	p := newPipeline(c)
	const n = 16
	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]pipeline.Result, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = p.Process(context.Background(), pipeline.Message{Body: body("test.a", "m"+string(rune('a'+i))), Exchange: "test"})
		}()
	}
	close(start)
	wg.Wait()
	for i, r := range results {
		if r.Outcome != pipeline.Mapped || len(r.Events) != 1 {
			t.Errorf("call %d: outcome %v reason %q err %v", i, r.Outcome, r.Reason, r.Err)
		}
	}
	if compiled, ok, failed := gatherLazy(t, reg); compiled != 1 || ok != 1 || failed != 0 {
		t.Errorf("builtins_compiled %v, compiles ok %v error %v; want 1, 1, 0", compiled, ok, failed)
	}
	if got := eng.Loaded(); got != 1 {
		t.Errorf("%d modules loaded, want 1", got)
	}
}

// TestBuiltinFailingToCompileOnFirstUse: a built-in whose manifest is known
// (stored beside the compilation cache) but whose code fails to load when
// its first notification arrives: that notification fails with reason load
// (the broker dead-letters it), the failure is counted, and calls within the
// retry interval fail the same way without compiling again.
func TestBuiltinFailingToCompileOnFirstUse(t *testing.T) {
	ctx := context.Background()
	cache := t.TempDir()
	bad := wasm(t, "forbidden") // imports a function the host does not offer
	sum := sha256.Sum256(bad)
	store := filepath.Join(cache, "tally-manifests-v1")
	if err := os.MkdirAll(store, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, hex.EncodeToString(sum[:])+".json"),
		[]byte(`{"name":"broken","version":"1.0.0","event_types":["broken.*"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	eng, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: cache, Logger: testkit.Logger(), CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(ctx) })
	reg := prometheus.NewRegistry()
	c := newCatalog(t, catalog.Options{Engine: eng, Registerer: reg, Builtin: map[string][]byte{
		"broken.wasm": bad, "echo.wasm": wasm(t, "echo_v1"),
	}})
	p, err := pipeline.New(pipeline.Options{Router: c, Logger: testkit.Logger(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		r := p.Process(ctx, pipeline.Message{Body: body("broken.create", "b"+string(rune('0'+i))), Exchange: "test"})
		var me *runtime.MapError
		if r.Outcome != pipeline.Failed || r.Reason != string(runtime.ReasonLoad) || r.Module != "broken@1.0.0" ||
			!errors.As(r.Err, &me) || !errors.Is(r.Err, runtime.ErrInvalidModule) {
			t.Fatalf("call %d: outcome %v reason %q module %q err %v", i, r.Outcome, r.Reason, r.Module, r.Err)
		}
	}
	if compiled, ok, failed := gatherLazy(t, reg); compiled != 0 || ok != 0 || failed != 1 {
		t.Errorf("builtins_compiled %v, compiles ok %v error %v; want 0, 0, 1 (the second call within the retry interval does not compile)", compiled, ok, failed)
	}
	if got, err := testutil.GatherAndCount(reg, "tally_collector_mapper_failures_total"); err != nil || got == 0 {
		t.Fatalf("mapper_failures_total not gathered: %d %v", got, err)
	}
	if got := failures(t, reg, "load"); got != 2 {
		t.Errorf("mapper_failures_total{reason=load} = %v, want 2", got)
	}
	if m := mustModule(t, c, "broken"); m.Active.Compiled {
		t.Error("broken shown compiled")
	}
	// The other built-ins are unaffected.
	if ev := mapOne(t, p, "test.a", "e1"); ev.Source.Mapper != "echo@1.0.0" {
		t.Errorf("echo after broken failed: %+v", ev)
	}
}

// failures is tally_collector_mapper_failures_total{reason}.
func failures(t testing.TB, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tally_collector_mapper_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no tally_collector_mapper_failures_total{reason=%q}", reason)
	return 0
}
