package runtime_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// TestInspectStoresTheManifest: the first Inspect compiles the module, reads
// its manifest and closes it (nothing stays loaded); the manifest is stored
// beside the compilation cache, and the next Inspect, in a new engine,
// answers from the store without compiling.
func TestInspectStoresTheManifest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wasm := wat(t, "noop")
	e := newEngine(t, runtime.Config{CacheDir: dir})
	in, err := e.Inspect(ctx, "testdata/noop.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(wasm)
	if in.Stored || in.Manifest.Name != "noop" || in.Manifest.Version != "1.0.0" || in.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("first inspection: %+v", in)
	}
	if n := e.Loaded(); n != 0 {
		t.Fatalf("%d modules loaded after Inspect, want 0", n)
	}
	stored := filepath.Join(dir, "tally-manifests-v1", in.SHA256+".json")
	if _, err := os.Stat(stored); err != nil {
		t.Fatalf("manifest not stored: %v", err)
	}

	e2 := newEngine(t, runtime.Config{CacheDir: dir})
	in2, err := e2.Inspect(ctx, "testdata/noop.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	if !in2.Stored || in2.Manifest.Name != "noop" || in2.Manifest.EventTypes[0] != "*" || in2.SHA256 != in.SHA256 {
		t.Fatalf("second inspection: %+v", in2)
	}
	if n := e2.Loaded(); n != 0 {
		t.Fatalf("%d modules loaded after a stored Inspect, want 0", n)
	}

	// A stored manifest that does not pass the checks is not trusted: the
	// module is compiled again and the file rewritten.
	if err := os.WriteFile(stored, []byte(`{"name":"","version":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	in3, err := e2.Inspect(ctx, "testdata/noop.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	if in3.Stored || in3.Manifest.Name != "noop" {
		t.Fatalf("inspection over a bad stored manifest: %+v", in3)
	}
	if in4, err := e2.Inspect(ctx, "testdata/noop.wasm", wasm); err != nil || !in4.Stored {
		t.Fatalf("the rewritten manifest is not used: %+v %v", in4, err)
	}
}

// TestInspectRefusesAnInvalidModule: Inspect checks the module as Load does,
// and stores nothing for a module it refused.
func TestInspectRefusesAnInvalidModule(t *testing.T) {
	dir := t.TempDir()
	e := newEngine(t, runtime.Config{CacheDir: dir})
	_, err := e.Inspect(context.Background(), "testdata/forbidden.wasm", wat(t, "forbidden"))
	if !errors.Is(err, runtime.ErrInvalidModule) {
		t.Fatalf("err = %v, want ErrInvalidModule", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tally-manifests-v1")); len(ents) != 0 {
		t.Fatalf("stored for a refused module: %v", ents)
	}
}

// TestInspectWithoutCacheDir: without a cache directory every Inspect
// compiles, and nothing stays loaded.
func TestInspectWithoutCacheDir(t *testing.T) {
	e, err := runtime.NewEngine(context.Background(), runtime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	for range 2 {
		in, err := e.Inspect(context.Background(), "testdata/noop.wasm", wat(t, "noop"))
		if err != nil || in.Stored || in.Manifest.Name != "noop" {
			t.Fatalf("inspection: %+v %v", in, err)
		}
	}
	if n := e.Loaded(); n != 0 {
		t.Fatalf("%d modules loaded, want 0", n)
	}
}
