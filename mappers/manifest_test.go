package mappers_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/mappers"
	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// TestManifestRecords: every built-in module has its manifest recorded
// beside it, and the record is what the module answers from tally_manifest,
// compiled and asked (metered, as the daemon runs them by default, and not:
// the pass changes the code, never the manifest).
func TestManifestRecords(t *testing.T) {
	mods, err := mappers.Builtin()
	if errors.Is(err, mappers.ErrMissing) {
		testkit.Missing(t, "the built-in mappers are not built: run make wasm (make build and make test build them)")
	}
	if err != nil {
		t.Fatal(err)
	}
	records, err := mappers.Manifests()
	if err != nil {
		t.Fatal(err)
	}
	if len(records) != len(mods) {
		t.Errorf("%d manifest records for %d modules", len(records), len(mods))
	}
	ctx := context.Background()
	for _, metered := range []bool{false, true} {
		eng, err := runtime.NewEngine(ctx, runtime.Config{CacheDir: testkit.CacheDir(t), Metered: metered, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		for file, wasm := range mods {
			rec, ok := records[file]
			if !ok {
				t.Errorf("%s: no manifest recorded beside it (run make wasm)", file)
				continue
			}
			want, err := runtime.ParseManifest(rec)
			if err != nil {
				t.Errorf("%s: recorded manifest: %v", file, err)
				continue
			}
			m, err := eng.Load(ctx, "builtin:"+file, wasm)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Manifest(); !reflect.DeepEqual(got, want) {
				t.Errorf("%s (metered %v): the module answers %+v, the record says %+v (run make wasm)", file, metered, got, want)
			}
			_ = m.Close(ctx)
		}
		_ = eng.Close(ctx)
	}
}
