package runtime_test

import (
	"context"
	"os"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime"
)

func loadAndClose(t *testing.T, dir string, cfg runtime.Config, wasm []byte) {
	t.Helper()
	ctx := context.Background()
	cfg.CacheDir = dir
	e := newEngine(t, cfg)
	m, err := e.Load(ctx, "testdata/noop.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// cachedNoop loads the noop module once through a new compilation cache
// directory; it answers the directory, the module, and the cache's entries,
// of which there must be some.
func cachedNoop(t *testing.T) (string, []byte, map[string]os.FileInfo) {
	t.Helper()
	dir := t.TempDir()
	wasm := wat(t, "noop")
	loadAndClose(t, dir, runtime.Config{}, wasm)
	entries := testkit.CacheEntries(t, dir)
	if len(entries) == 0 {
		t.Fatal("no entry in the compilation cache after a load")
	}
	return dir, wasm, entries
}

// TestCompilationCacheReused: a second engine on the same directory takes
// the module from it (no entry written anew), and the metering pass, which
// changes the compiled code, keys a separate entry.
func TestCompilationCacheReused(t *testing.T) {
	dir, wasm, first := cachedNoop(t)
	loadAndClose(t, dir, runtime.Config{}, wasm)
	again := testkit.CacheEntries(t, dir)
	if len(again) != len(first) {
		t.Fatalf("%d entries after a second load, want the %d of the first", len(again), len(first))
	}
	for p, st := range first {
		if !again[p].ModTime().Equal(st.ModTime()) {
			t.Fatalf("entry %s written again by the second load", p)
		}
	}
	loadAndClose(t, dir, runtime.Config{Metered: true}, wasm)
	if metered := testkit.CacheEntries(t, dir); len(metered) <= len(first) {
		t.Fatalf("%d entries after a metered load, want more than the %d unmetered", len(metered), len(first))
	}
}

// TestCompilationCacheTruncatedEntry: an entry cut short is never trusted:
// the module is compiled again and the entry written whole.
func TestCompilationCacheTruncatedEntry(t *testing.T) {
	dir, wasm, whole := cachedNoop(t)
	for p, st := range whole {
		if err := os.Truncate(p, st.Size()/2); err != nil {
			t.Fatal(err)
		}
	}
	loadAndClose(t, dir, runtime.Config{}, wasm)
	for p, st := range testkit.CacheEntries(t, dir) {
		if want := whole[p]; want == nil || st.Size() != want.Size() {
			t.Fatalf("entry %s is %d bytes after the module was compiled again, want %d", p, st.Size(), whole[p].Size())
		}
	}
}

// TestCompilationCacheDamagedEntry: an entry whose machine code changed
// (its checksum no longer matches) is compiled again too.
func TestCompilationCacheDamagedEntry(t *testing.T) {
	dir, wasm, whole := cachedNoop(t)
	for p, st := range whole {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-int(st.Size())/3] ^= 0xff
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	loadAndClose(t, dir, runtime.Config{}, wasm)
	if got := testkit.CacheEntries(t, dir); len(got) != len(whole) {
		t.Fatalf("%d entries, want %d", len(got), len(whole))
	}
}
