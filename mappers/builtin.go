package mappers

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

//go:embed dist
var dist embed.FS

// MinMemoryLimitMiB is the least linear memory, in MiB, an instance of every
// built-in module can run in, and so the least MAPPER_MEMORY_LIMIT_MIB. Each
// module declares 33 pages (2.06 MiB) it needs to instantiate; every fixture
// maps within 3 MiB, and the largest fixture of each grown to the 1 MiB body
// limit within 4 MiB, measured
// by lowering the limit a MiB at a time. The minimum is twice that;
// TestBuiltinWithinMinMemory maps every fixture and the grown inputs at it.
const MinMemoryLimitMiB = 8

// Builtin returns the built-in modules by file name ("nova.wasm", ...). The
// runtime loads each under the name "builtin:" + file name. The bytes are the
// caller's. It fails with ErrMissing when no module was built into the
// binary.
func Builtin() (map[string][]byte, error) {
	return load(dist, "dist")
}

// manifestSuffix ends the file, beside each built-in module in the binary,
// where the build recorded the module's manifest: nova.wasm's is
// nova.manifest.json.
const manifestSuffix = ".manifest.json"

// Manifests returns the manifest the build recorded beside each built-in
// module, keyed as Builtin keys the modules ("nova.wasm", ...): the JSON
// document the module's tally_manifest answers, so the catalogue routes to
// a built-in without compiling it. A module without its record is missing
// from the map (the catalogue then compiles it to read it). It fails with
// ErrMissing as Builtin does.
func Manifests() (map[string][]byte, error) {
	return loadManifests(dist, "dist")
}

func loadManifests(fsys fs.FS, dir string) (map[string][]byte, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read built-in mappers: %w", err)
	}
	mfs := map[string][]byte{}
	wasm := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".wasm") {
			wasm++
		}
		if e.IsDir() || !strings.HasSuffix(e.Name(), manifestSuffix) {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read built-in mapper manifest %s: %w", e.Name(), err)
		}
		mfs[strings.TrimSuffix(e.Name(), manifestSuffix)+".wasm"] = b
	}
	if wasm == 0 {
		return nil, ErrMissing
	}
	return mfs, nil
}

func load(fsys fs.FS, dir string) (map[string][]byte, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read built-in mappers: %w", err)
	}
	mods := make(map[string][]byte, len(entries))
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".wasm") {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read built-in mapper %s: %w", e.Name(), err)
		}
		mods[e.Name()] = b
	}
	if len(mods) == 0 {
		return nil, ErrMissing
	}
	return mods, nil
}
