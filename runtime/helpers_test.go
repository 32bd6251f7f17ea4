package runtime_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/jsonindex"
	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// cacheDir is the shared compilation cache of the tests (TALLY_OSC_TEST_CACHE,
// exported by the Makefile), or a temporary directory.
func cacheDir(t testing.TB) string {
	if d := os.Getenv("TALLY_OSC_TEST_CACHE"); d != "" {
		return d
	}
	return t.TempDir()
}

func newEngine(t testing.TB, cfg runtime.Config) *runtime.Engine {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = cacheDir(t)
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

// wat returns the module runtime/testdata/<name>.wasm, built by `make wasm`.
// When it is missing it is assembled with wat2wasm into a temporary directory.
func wat(t testing.TB, name string) []byte {
	t.Helper()
	p := filepath.Join("testdata", name+".wasm")
	if b, err := os.ReadFile(p); err == nil {
		return b
	}
	out := filepath.Join(t.TempDir(), name+".wasm")
	cmd := exec.Command("wat2wasm", "-o", out, filepath.Join("testdata", name+".wat"))
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s missing (run make wasm) and wat2wasm failed: %v %s", p, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// guest returns a module built by another component (the SDK or a mapper) at
// path relative to the repository root. Missing: skip, unless CI=true.
func guest(t testing.TB, path, what string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", path))
	if err != nil {
		msg := what + " not built: " + path + " is missing (run make wasm)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return b
}

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

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
