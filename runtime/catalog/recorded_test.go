package catalog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// emptyCacheEngine is an engine whose compilation cache starts empty, so
// what it compiled shows in the directory.
func emptyCacheEngine(t *testing.T) (*runtime.Engine, string) {
	t.Helper()
	dir := t.TempDir()
	e, err := runtime.NewEngine(context.Background(), runtime.Config{CacheDir: dir, Logger: testkit.Logger(), PoolSize: 2, CallTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e, dir
}

// TestRecordedManifestsCompileNothingAtStart: with the manifests the build
// recorded, a start compiles no built-in module (nothing in the compilation
// cache, builtins_compiled 0), routes by the records, and compiles a module
// at the first notification it claims only.
func TestRecordedManifestsCompileNothingAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	eng, dir := emptyCacheEngine(t)
	c := newCatalog(t, catalog.Options{Engine: eng, Registerer: reg,
		Builtin: map[string][]byte{"echo.wasm": wasm(t, "echo_v1"), "special.wasm": wasm(t, "special")},
		BuiltinManifests: map[string][]byte{
			"echo.wasm":    []byte(`{"name":"echo","version":"1.0.0","event_types":["test.*"],"releases":["2024.1"]}`),
			"special.wasm": []byte(`{"name":"special","version":"1.0.0","event_types":["test.special"],"releases":["2024.1"]}`),
		}})
	if n := len(testkit.CacheEntries(t, dir)); n != 0 {
		t.Fatalf("%d modules compiled at start, want 0", n)
	}
	if compiled, _, _ := gatherLazy(t, reg); compiled != 0 {
		t.Fatalf("builtins_compiled = %v after start, want 0", compiled)
	}
	if r, ok := c.Route("test.special"); !ok || r.ID() != "special@1.0.0" {
		t.Fatalf("route test.special: %v %v", r, ok)
	}
	if ev := mapOne(t, newPipeline(c), "test.special", "m1"); ev.Source.Mapper != "special@1.0.0" {
		t.Fatalf("first notification: %+v", ev)
	}
	if n := len(testkit.CacheEntries(t, dir)); n != 1 {
		t.Fatalf("%d modules compiled after one notification, want 1", n)
	}
	if compiled, ok, _ := gatherLazy(t, reg); compiled != 1 || ok != 1 {
		t.Fatalf("builtins_compiled %v, compiles ok %v; want 1, 1", compiled, ok)
	}
}

// TestRecordedManifestMismatch: a module that does not answer the manifest
// recorded for it is not used: its notifications fail with reason load.
func TestRecordedManifestMismatch(t *testing.T) {
	eng, _ := emptyCacheEngine(t)
	c := newCatalog(t, catalog.Options{Engine: eng,
		Builtin:          map[string][]byte{"echo.wasm": wasm(t, "echo_v1")},
		BuiltinManifests: map[string][]byte{"echo.wasm": []byte(`{"name":"echo","version":"9.0.0","event_types":["test.*"],"releases":[]}`)}})
	r := newPipeline(c).Process(context.Background(), pipeline.Message{Body: body("test.a", "m1"), Exchange: "test"})
	var me *runtime.MapError
	if r.Outcome == pipeline.Mapped || !errors.As(r.Err, &me) || me.Reason != runtime.ReasonLoad || !strings.Contains(r.Err.Error(), "recorded") {
		t.Fatalf("outcome %v reason %q err %v; want a load failure", r.Outcome, r.Reason, r.Err)
	}
}

// TestBrokenRecordFailsStart: a record that is not a valid manifest fails
// the start, naming the module.
func TestBrokenRecordFailsStart(t *testing.T) {
	eng, _ := emptyCacheEngine(t)
	_, err := catalog.New(context.Background(), catalog.Options{Engine: eng,
		Builtin:          map[string][]byte{"echo.wasm": wasm(t, "echo_v1")},
		BuiltinManifests: map[string][]byte{"echo.wasm": []byte(`{"name":""}`)}})
	if err == nil {
		t.Fatal("catalog started with a broken manifest record")
	}
}
