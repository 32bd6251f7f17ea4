package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

// CacheEnv names the directory of the compiled-module cache the tests share
// (the Makefile exports it as .cache/wazero), so that each package does not
// compile the same modules again.
const CacheEnv = "TALLY_OSC_TEST_CACHE"

// CacheDir answers the compiled-module cache of the tests: $TALLY_OSC_TEST_CACHE,
// or one directory under the system's temporary directory shared by plain
// `go test` runs. wazero's cache is safe for concurrent use by several
// processes.
func CacheDir(tb testing.TB) string {
	tb.Helper()
	if d := os.Getenv(CacheEnv); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "tally-osc-test-wazero-cache")
}

// CacheEntries answers the compiled modules in the compilation cache dir
// (one directory a wazero version, one file a module), by path.
func CacheEntries(tb testing.TB, dir string) map[string]os.FileInfo {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]os.FileInfo{}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			tb.Fatal(err)
		}
		out[p] = st
	}
	return out
}

// Logger answers a logger that discards, or writes to stderr when TEST_LOG
// is set (to read what a failing test's component said).
func Logger() zerolog.Logger {
	if os.Getenv("TEST_LOG") != "" {
		return zerolog.New(zerolog.NewConsoleWriter()).With().Timestamp().Logger()
	}
	return zerolog.Nop()
}

// BuiltModule answers a module that make builds, at path relative to the
// repository's top directory (mappers/dist/nova.wasm, built by make wasm;
// wasm-sdk/testdata/noop.wasm, built by make test-wasm). When it is missing
// the test ends, naming the make target.
func BuiltModule(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(RepoPath(tb, path))
	if err != nil {
		target := "test-wasm"
		if filepath.Dir(path) == filepath.Join("mappers", "dist") {
			target = "wasm"
		}
		Missing(tb, "%s is not built: run make %s (make test builds it)", path, target)
	}
	return b
}

// WAT answers dir/<name>.wasm as make test-wasm assembles it from
// dir/<name>.wat; when it is not there it assembles it with wat2wasm into a
// temporary directory. No wat2wasm ends the test, naming Debian's wabt.
func WAT(tb testing.TB, dir, name string) []byte {
	tb.Helper()
	p := filepath.Join(dir, name+".wasm")
	if b, err := os.ReadFile(p); err == nil {
		return b
	}
	wat2wasm := LookPath(tb, "wat2wasm", "wabt")
	out := filepath.Join(tb.TempDir(), name+".wasm")
	if msg, err := exec.Command(wat2wasm, "-o", out, filepath.Join(dir, name+".wat")).CombinedOutput(); err != nil {
		tb.Fatalf("wat2wasm %s: %v\n%s", filepath.Join(dir, name+".wat"), err, msg)
	}
	return ReadFile(tb, out)
}
