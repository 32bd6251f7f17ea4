// Command recordmanifest records a built-in module's manifest beside it, as
// part of the build that makes the module (mappers/mappers.mk):
//
//	go run ./mappers/internal/recordmanifest mappers/dist/nova.wasm
//
// writes mappers/dist/nova.manifest.json, the manifest the module answers
// from tally_manifest, read by loading it as the collector does. The binary
// embeds the record with the module (mappers.Manifests), so a start knows
// which built-in module claims which notification without compiling any;
// TestManifestRecords checks every record against its module.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: recordmanifest MODULE.wasm...")
		os.Exit(2)
	}
	ctx := context.Background()
	// The cache of the build, if any, spares compiling a module twice.
	e, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: os.Getenv("TALLY_OSC_TEST_CACHE"), Logger: zerolog.Nop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "recordmanifest:", err)
		os.Exit(1)
	}
	defer func() { _ = e.Close(ctx) }() // nothing is written through the engine
	for _, p := range os.Args[1:] {
		if err := record(ctx, e, p); err != nil {
			fmt.Fprintln(os.Stderr, "recordmanifest:", err)
			os.Exit(1)
		}
	}
}

func record(ctx context.Context, e *runtime.Engine, path string) error {
	wasm, err := os.ReadFile(path) //nolint:gosec // G703: the paths are the build's own, given by make
	if err != nil {
		return err
	}
	m, err := e.Load(ctx, path, wasm)
	if err != nil {
		return err
	}
	b, err := runtime.MarshalManifest(m.Manifest())
	_ = m.Close(ctx)
	if err != nil {
		return err
	}
	out := strings.TrimSuffix(path, ".wasm") + ".manifest.json"
	tmp, err := os.CreateTemp(filepath.Dir(out), ".manifest-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), out) //nolint:gosec // G703: beside the module make named
	}
	if werr != nil {
		_ = os.Remove(tmp.Name()) //nolint:gosec // G703: the temporary file made just above
		return fmt.Errorf("record the manifest of %s: %w", path, werr)
	}
	return nil
}
