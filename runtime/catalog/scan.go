package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// FixtureSuffix names the fixture directory of a drop-in module: the module
// nova.wasm ships its pairs in nova.fixtures/ beside it.
const FixtureSuffix = ".fixtures"

// fixtureDir returns the fixture directory of the drop-in module at wasmPath.
//
//	fixtureDir("/etc/tally/mappers/nova.wasm") // "/etc/tally/mappers/nova.fixtures"
func fixtureDir(wasmPath string) string {
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

// found is a drop-in file seen by a scan. skip, when set, is why the file is
// not read at all (ErrNotRegular, ErrTooLarge, ErrOutsideDir, or a stat that
// failed): the reload records it without opening the file.
type found struct {
	path, base string
	key        statKey
	skip       error
}

// scanDir lists the *.wasm files of dir. Names starting with a dot, such as a
// ConfigMap's ..data, are left out, and so are directories and dangling
// links. A symbolic link is followed only when it resolves to a path inside
// dir (a ConfigMap's keys are links through ..data); one that leads outside,
// a file that is not regular (a FIFO, a device) and a file larger than max
// are listed with the reason they are skipped, and never opened. A file that
// cannot be examined is listed with its error: it never stops the scan of
// the others.
func scanDir(dir string, max int64) ([]found, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read mappers directory: %w", err)
	}
	var real string // dir with its links resolved, computed once a link is met
	var out []found
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".wasm") {
			continue
		}
		p := filepath.Join(dir, name)
		f := found{path: p, base: name}
		if e.Type()&fs.ModeSymlink != 0 {
			if real == "" {
				if real, err = filepath.EvalSymlinks(dir); err != nil {
					return nil, fmt.Errorf("resolve mappers directory: %w", err)
				}
			}
			target, err := filepath.EvalSymlinks(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue // a dangling symlink, or removed meanwhile
			}
			if err != nil {
				f.skip = fmt.Errorf("resolve %s: %w", p, err)
				out = append(out, f)
				continue
			}
			if !inside(real, target) {
				f.skip = fmt.Errorf("%w (to %s)", ErrOutsideDir, target)
			}
		}
		fi, err := os.Stat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // a dangling symlink, or removed meanwhile
			}
			f.skip = fmt.Errorf("stat %s: %w", p, err)
			out = append(out, f)
			continue
		}
		if fi.IsDir() {
			continue
		}
		f.key = statKey{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ino: inode(fi)}
		switch {
		case f.skip != nil:
		case !fi.Mode().IsRegular():
			f.skip = fmt.Errorf("%w (%s)", ErrNotRegular, fileType(fi.Mode()))
		case fi.Size() > max:
			f.skip = fmt.Errorf("%w: %d bytes, the cap is %d", ErrTooLarge, fi.Size(), max)
		default:
			f.key.fixtures = fixtureStat(fixtureDir(p))
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

// inside reports whether path, resolved, lies within dir, resolved.
func inside(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// fileType names the kind of a file that is not regular.
func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return m.Type().String()
}

// skipReason is the label of tally_collector_mapper_files_skipped_total for
// the reason a file was skipped.
func skipReason(err error) string {
	switch {
	case errors.Is(err, ErrNotRegular):
		return "not_regular"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrOutsideDir):
		return "outside_dir"
	}
	return "unreadable"
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

// readRegular reads the regular file at path, max bytes at most, without
// ever blocking on what is not a regular file: it opens with O_NONBLOCK (a
// FIFO opens at once instead of waiting for a writer), checks the open file
// itself (fstat: regular, max bytes at most, and, when ino is not 0, the
// inode the scan examined, so a file swapped in meanwhile is not read), then
// reads through a limit of max+1 bytes, so a file that grows meanwhile is
// refused too.
func readRegular(path string, max int64, ino uint64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w (%s)", ErrNotRegular, fileType(fi.Mode()))
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%w: %d bytes, the cap is %d", ErrTooLarge, fi.Size(), max)
	}
	if ino != 0 && inode(fi) != ino {
		return nil, errors.New("replaced while it was read; read again at the next scan")
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: it grew past %d bytes while it was read", ErrTooLarge, max)
	}
	return b, nil
}

// content is what a drop-in file holds.
type content struct {
	wasm     []byte
	sha      string // of the wasm bytes
	digest   string // of the wasm bytes and the fixture files
	fixtures string // fixture directory, "" if none
}

// readContent reads the drop-in f and its fixture files with readRegular,
// each max bytes at most.
func readContent(f found, max int64) (content, error) {
	wasm, err := readRegular(f.path, max, f.key.ino)
	if err != nil {
		return content{}, fmt.Errorf("read %s: %w", f.path, err)
	}
	sum := sha256.Sum256(wasm)
	c := content{wasm: wasm, sha: hex.EncodeToString(sum[:])}
	h := sha256.New()
	h.Write(sum[:])
	dir := fixtureDir(f.path)
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
			b, err := readRegular(filepath.Join(dir, e.Name()), max, 0)
			if err != nil {
				return content{}, fmt.Errorf("read fixture %s: %w", e.Name(), err)
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
