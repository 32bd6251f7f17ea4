package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/tally-billing/tally-openstack-collector/internal/jsonindex"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
)

// FixtureSuffix names the fixture directory of a drop-in module: the module
// nova.wasm ships its pairs in nova.fixtures/ beside it.
const FixtureSuffix = ".fixtures"

// FixtureDir returns the fixture directory of the drop-in module at wasmPath.
//
//	FixtureDir("/etc/tally/mappers/nova.wasm") // "/etc/tally/mappers/nova.fixtures"
func FixtureDir(wasmPath string) string {
	return strings.TrimSuffix(wasmPath, ".wasm") + FixtureSuffix
}

// statKey identifies the content of a drop-in cheaply: the stat of the module
// file (its symlink followed) and of its fixture files. When it is unchanged,
// the file is not read again.
type statKey struct {
	size, mtime int64
	ino         uint64
	fixtures    string
}

// found is a drop-in file seen by a scan.
type found struct {
	path, base string
	key        statKey
}

// scanDir lists the *.wasm files of dir (symlinks followed; names starting
// with a dot, such as a ConfigMap's ..data, are skipped).
func scanDir(dir string) ([]found, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read mappers directory: %w", err)
	}
	var out []found
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".wasm") {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // a dangling symlink, or removed meanwhile
			}
			return nil, fmt.Errorf("stat %s: %w", p, err)
		}
		if fi.IsDir() {
			continue
		}
		out = append(out, found{path: p, base: name, key: statKey{
			size: fi.Size(), mtime: fi.ModTime().UnixNano(), ino: inode(fi), fixtures: fixtureStat(FixtureDir(p)),
		}})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// fixtureStat summarises the fixture directory's files (name, size, mtime).
func fixtureStat(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", e.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	if b.Len() == 0 {
		return "empty"
	}
	return b.String()
}

// content is what a drop-in file holds.
type content struct {
	wasm     []byte
	sha      string // of the wasm bytes
	digest   string // of the wasm bytes and the fixture files
	fixtures string // fixture directory, "" if none
}

func readContent(path string) (content, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return content{}, fmt.Errorf("read %s: %w", path, err)
	}
	sum := sha256.Sum256(wasm)
	c := content{wasm: wasm, sha: hex.EncodeToString(sum[:])}
	h := sha256.New()
	h.Write(sum[:])
	dir := FixtureDir(path)
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		c.fixtures = dir
		entries, err := os.ReadDir(dir)
		if err != nil {
			return content{}, fmt.Errorf("read %s: %w", dir, err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return content{}, fmt.Errorf("read fixture: %w", err)
			}
			fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(b))
			h.Write(b)
		}
	}
	c.digest = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// runFixtures maps every pair of dir with m; the error lists the failing
// cases (at most three, then a count).
func runFixtures(ctx context.Context, m module, dir string) error {
	results, err := fixture.Run(dir, func(in []byte) ([]byte, error) {
		var idx jsonindex.Index
		if err := idx.Parse(in); err != nil {
			idx.SetRaw(in)
		}
		return fixture.HostDocument(m.Map(ctx, &idx, runtime.Source{}))
	}, false)
	if err != nil {
		return fmt.Errorf("fixtures: %w", err)
	}
	var failed []string
	for _, r := range results {
		if r.Err != nil {
			failed = append(failed, firstLine(r.Err.Error()))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	shown := failed
	if len(shown) > 3 {
		shown = shown[:3]
	}
	msg := strings.Join(shown, "; ")
	if len(failed) > len(shown) {
		msg += fmt.Sprintf("; and %d more", len(failed)-len(shown))
	}
	return fmt.Errorf("%d of %d fixture pairs failed: %s", len(failed), len(results), msg)
}

// firstLine makes a multi-line fixture failure (a diff) fit one line.
func firstLine(s string) string {
	f := strings.Fields(strings.ReplaceAll(s, "\n", " | "))
	s = strings.Join(f, " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
