package mappers

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// services are the built-in mappers, one directory and one module each.
var services = []string{"nova", "cinder", "neutron", "glance", "octavia", "manila", "designate", "swift", "trove", "ironic", "channel"}

func TestLoadMissing(t *testing.T) {
	fsys := fstest.MapFS{"dist/.keep": {}}
	if _, err := load(fsys, "dist"); !errors.Is(err, ErrMissing) {
		t.Fatalf("err = %v, want ErrMissing", err)
	}
}

func TestLoadReadsOnlyModules(t *testing.T) {
	fsys := fstest.MapFS{
		"dist/.keep":     {},
		"dist/a.wasm":    {Data: []byte("\x00asm")},
		"dist/notes.txt": {Data: []byte("x")},
	}
	mods, err := load(fsys, "dist")
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 1 || !bytes.Equal(mods["a.wasm"], []byte("\x00asm")) {
		t.Fatalf("mods = %v", mods)
	}
}

// TestBuiltin checks that every built module is embedded unchanged.
func TestBuiltin(t *testing.T) {
	mods, err := Builtin()
	if errors.Is(err, ErrMissing) {
		testkit.Missing(t, "the built-in mappers are not built: run make wasm (make build and make test build them)")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range services {
		want, err := os.ReadFile(filepath.Join("dist", s+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mods[s+".wasm"], want) {
			t.Errorf("%s.wasm: embedded bytes differ from dist/", s)
		}
	}
}

func TestLoadManifestsKeyedByModule(t *testing.T) {
	fsys := fstest.MapFS{
		"dist/a.wasm":          {Data: []byte("\x00asm")},
		"dist/a.manifest.json": {Data: []byte(`{"name":"a"}`)},
		"dist/b.wasm":          {Data: []byte("\x00asm")},
	}
	mfs, err := loadManifests(fsys, "dist")
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || string(mfs["a.wasm"]) != `{"name":"a"}` {
		t.Fatalf("manifests = %q", mfs)
	}
	if _, err := loadManifests(fstest.MapFS{"dist/.keep": {}}, "dist"); !errors.Is(err, ErrMissing) {
		t.Fatalf("err = %v, want ErrMissing", err)
	}
}
