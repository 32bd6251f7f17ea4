package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// manifestDir is the directory, inside Config.CacheDir beside wazero's own,
// where Inspect keeps the manifest of every module it compiled: one file
// <sha256>.json per module, named by the SHA-256 of the module's bytes.
const manifestDir = "tally-manifests-v1"

// Inspection is what Inspect learned about a module.
type Inspection struct {
	Manifest Manifest
	// SHA256 is the hex SHA-256 of the module's bytes.
	SHA256 string
	// Stored is true when the manifest came from the store beside the
	// compilation cache: nothing was compiled.
	Stored bool
}

// Inspect returns the manifest of wasm without keeping the module loaded.
// With Config.CacheDir it first looks in the manifest store beside the
// compilation cache (keyed by the module's SHA-256), which costs a file read;
// otherwise it loads the module as Load does (compile, validate, start an
// instance, read the manifest), closes it, and stores the manifest for the
// next time. A module that does not meet the ABI fails as with Load.
//
// A stored manifest is read through the same checks as the guest's answer;
// one that fails them is ignored and the module compiled. Inspect does not
// check the module itself when the manifest was stored: Load does, when the
// module is needed.
func (e *Engine) Inspect(ctx context.Context, name string, wasm []byte, opts ...ModuleOption) (Inspection, error) {
	sum := sha256.Sum256(wasm)
	in := Inspection{SHA256: hex.EncodeToString(sum[:])}
	path := e.manifestPath(in.SHA256)
	if path != "" {
		if b, err := os.ReadFile(path); err == nil {
			mf, err := parseManifest(b)
			if err == nil {
				in.Manifest, in.Stored = mf, true
				return in, nil
			}
			e.log.Warn().Str("module", name).Str("file", path).Err(err).
				Msg("stored manifest unreadable; compiling the module to read it again")
		}
	}
	m, err := e.Load(ctx, name, wasm, opts...)
	if err != nil {
		return in, err
	}
	in.Manifest = m.Manifest()
	if err := m.Close(ctx); err != nil {
		return in, fmt.Errorf("close %s after reading its manifest: %w", name, err)
	}
	if path != "" {
		if err := storeManifest(path, in.Manifest); err != nil {
			// Only the next start is slower: it compiles the module again.
			e.log.Warn().Str("module", name).Err(err).Msg("store manifest")
		}
	}
	return in, nil
}

// manifestPath is where the manifest of the module with this SHA-256 is
// stored; "" without a cache directory.
func (e *Engine) manifestPath(sha string) string {
	if e.cfg.CacheDir == "" {
		return ""
	}
	return filepath.Join(e.cfg.CacheDir, manifestDir, sha+".json")
}

// storeManifest writes mf to path: to a temporary file beside it, then
// renamed into place, so a reader never sees half a file.
func storeManifest(path string, mf Manifest) error {
	b, err := json.Marshal(mf)
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("manifest store: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("manifest store: %w", err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("manifest store: %w", werr)
	}
	return nil
}

// Loaded returns the number of modules loaded in the engine and not closed:
// each holds compiled code and at least one instance.
func (e *Engine) Loaded() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.modules)
}
