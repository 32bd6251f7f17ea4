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

// Builtin returns the built-in modules by file name ("nova.wasm", ...). The
// runtime loads each under the name "builtin:" + file name. The bytes are the
// caller's. It fails with ErrMissing when no module was built into the
// binary.
func Builtin() (map[string][]byte, error) {
	return load(dist, "dist")
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
