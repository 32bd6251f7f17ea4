package runtime_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

func newEngine(t testing.TB, cfg runtime.Config) *runtime.Engine {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = testkit.CacheDir(t)
	}
	if cfg.Logger.GetLevel() == zerolog.DebugLevel && os.Getenv("TEST_LOG") == "" {
		cfg.Logger = zerolog.Nop()
	}
	e, err := runtime.NewEngine(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// wat returns the module runtime/testdata/<name>.wasm, built by make
// test-wasm, or assembled from its .wat when it is not there.
func wat(t testing.TB, name string) []byte { t.Helper(); return testkit.WAT(t, "testdata", name) }

// guest returns a module built by another component (the SDK or a mapper) at
// path relative to the repository root.
func guest(t testing.TB, path string) []byte { t.Helper(); return testkit.BuiltModule(t, path) }

func load(t testing.TB, e *runtime.Engine, name string, opts ...runtime.ModuleOption) *runtime.Module {
	t.Helper()
	m, err := e.Load(context.Background(), "testdata/"+name+".wasm", wat(t, name), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func index(t testing.TB, doc string) *jsonindex.Index {
	t.Helper()
	var x jsonindex.Index
	if err := x.Parse([]byte(doc)); err != nil {
		t.Fatal(err)
	}
	return &x
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
