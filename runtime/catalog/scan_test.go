package catalog_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/catalog"
)

// mustSkip checks that file of dir is shown as skipped, with a reason that
// holds want, and serves nothing.
func mustSkip(t *testing.T, c *catalog.Catalog, dir, file, want string) {
	t.Helper()
	fs, ok := fileState(c.Status(), dir, file)
	if !ok {
		t.Fatalf("%s not in the status' files: %+v", file, c.Status().Files)
	}
	if fs.State != "skipped" || !strings.Contains(fs.Reason, want) {
		t.Fatalf("%s: state %q reason %q, want skipped with %q", file, fs.State, fs.Reason, want)
	}
}

func skippedCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	return testkit.Metric(t, reg, "tally_collector_mapper_files_skipped_total", reason)
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// echoBeside drops echo 1.0.0 into dir beside what the test put there and
// opens a catalogue over it with a registry of its own; echo must load,
// whatever else is skipped.
func echoBeside(t *testing.T, dir string) (*catalog.Catalog, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	_, c, _ := catalogOn(t, catalog.Options{Dir: dir, Registerer: reg}, "echo.wasm", "echo_v1")
	mustModule(t, c, "echo")
	return c, reg
}

// mkfifo makes a named pipe at path.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSymlinkToDevZeroIsSkipped: a link to /dev/zero is never read (it would
// be read until memory runs out); the start and the other files go on.
func TestSymlinkToDevZeroIsSkipped(t *testing.T) {
	dir := t.TempDir()
	symlink(t, "/dev/zero", filepath.Join(dir, "zero.wasm"))
	c, reg := echoBeside(t, dir)
	mustSkip(t, c, dir, "zero.wasm", "leads outside the mappers directory")
	if n := skippedCount(t, reg, "outside_dir"); n != 1 {
		t.Errorf("skipped{outside_dir} = %v, want 1", n)
	}
	if r := c.Status().LastReload; r == nil || r.OK || len(r.Skipped) != 1 {
		t.Errorf("last reload %+v, want one skipped file and not ok", r)
	}
	// Unchanged, it is neither counted nor logged again.
	c.Reload(context.Background())
	if n := skippedCount(t, reg, "outside_dir"); n != 1 {
		t.Errorf("after a second reload skipped{outside_dir} = %v, want still 1", n)
	}
}

// TestFIFOIsSkipped: a FIFO named x.wasm neither blocks the start, nor a
// reload, nor the close; it is skipped as not a regular file, directly or
// through a link inside the directory.
func TestFIFOIsSkipped(t *testing.T) {
	dir := t.TempDir()
	mkfifo(t, filepath.Join(dir, "x.wasm"))
	mkfifo(t, filepath.Join(dir, ".fifo"))
	symlink(t, ".fifo", filepath.Join(dir, "y.wasm"))
	c, reg := echoBeside(t, dir)
	mustSkip(t, c, dir, "x.wasm", "not a regular file (a named pipe)")
	mustSkip(t, c, dir, "y.wasm", "not a regular file (a named pipe)")

	drop(t, dir, "special.wasm", "special")
	r := c.Reload(context.Background())
	if !r.Changed || len(r.Loaded) != 1 {
		t.Fatalf("reload beside the FIFOs: %+v", r)
	}
	mustModule(t, c, "special")
	if n := skippedCount(t, reg, "not_regular"); n != 2 {
		t.Errorf("skipped{not_regular} = %v, want 2", n)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// TestFIFOFixtureIsSkipped: a FIFO among a module's fixture files does not
// block the reload either; the module is skipped, naming the fixture.
func TestFIFOFixtureIsSkipped(t *testing.T) {
	dir := t.TempDir()
	copyFixtures(t, dir, "echo", "echo.fixtures")
	mkfifo(t, filepath.Join(dir, "echo.fixtures", "zz.in.json"))
	_, c, _ := catalogOn(t, catalog.Options{Dir: dir}, "echo.wasm", "echo_v1")
	mustSkip(t, c, dir, "echo.wasm", "zz.in.json")
	mustSkip(t, c, dir, "echo.wasm", "not a regular file (a named pipe)")
	if _, ok := module(c.Status(), "echo"); ok {
		t.Fatal("echo loaded with a fixture that was never read")
	}
}

// TestFileSizeCap: a module of exactly MaxFileSize bytes loads; one byte over,
// it is skipped without being read.
func TestFileSizeCap(t *testing.T) {
	size := int64(len(wasm(t, "echo_v1")))
	eng := newEngine(t)
	for _, tc := range []struct {
		name string
		cap  int64
		load bool
	}{
		{"under the cap", size + 1, true},
		{"at the cap", size, true},
		{"one byte over the cap", size - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			dir, c, _ := catalogOn(t, catalog.Options{Engine: eng, MaxFileSize: tc.cap, Registerer: reg}, "echo.wasm", "echo_v1")
			_, loaded := module(c.Status(), "echo")
			if loaded != tc.load {
				t.Fatalf("cap %d, file %d bytes: loaded %v, want %v (files %+v)", tc.cap, size, loaded, tc.load, c.Status().Files)
			}
			if tc.load {
				return
			}
			mustSkip(t, c, dir, "echo.wasm", "larger than the size cap")
			if n := skippedCount(t, reg, "too_large"); n != 1 {
				t.Errorf("skipped{too_large} = %v, want 1", n)
			}
		})
	}
}

// TestFileSizeCapDefault: without MaxFileSize a file over
// DefaultMaxFileSize is skipped, and a sparse file makes that cheap to show.
func TestFileSizeCapDefault(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(catalog.DefaultMaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	c := newCatalog(t, catalog.Options{Dir: dir})
	mustSkip(t, c, dir, "big.wasm", "larger than the size cap")
}

// TestSymlinkOutsideDirIsSkipped: a link to a valid module outside the
// directory, by absolute or relative path, is not followed.
func TestSymlinkOutsideDirIsSkipped(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "mappers")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	drop(t, root, "echo.wasm", "echo_v1")
	symlink(t, filepath.Join(root, "echo.wasm"), filepath.Join(dir, "abs.wasm"))
	symlink(t, "../echo.wasm", filepath.Join(dir, "rel.wasm"))
	// Out and back in: resolved, it is inside.
	drop(t, dir, ".special", "special")
	symlink(t, "../mappers/.special", filepath.Join(dir, "back.wasm"))
	reg := prometheus.NewRegistry()
	c := newCatalog(t, catalog.Options{Dir: dir, Registerer: reg})
	mustSkip(t, c, dir, "abs.wasm", "leads outside the mappers directory")
	mustSkip(t, c, dir, "rel.wasm", "leads outside the mappers directory")
	if _, ok := module(c.Status(), "echo"); ok {
		t.Fatal("a module outside the directory was loaded")
	}
	mustModule(t, c, "special")
	if n := skippedCount(t, reg, "outside_dir"); n != 2 {
		t.Errorf("skipped{outside_dir} = %v, want 2", n)
	}
}

// TestSymlinkInsideDirLoads: a link to a file inside the directory is
// followed, also when the directory itself is reached through a link.
func TestSymlinkInsideDirLoads(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.MkdirAll(filepath.Join(real, "versions"), 0o755); err != nil {
		t.Fatal(err)
	}
	drop(t, filepath.Join(real, "versions"), "echo.wasm", "echo_v1")
	symlink(t, "versions/echo.wasm", filepath.Join(real, "echo.wasm"))
	dir := filepath.Join(root, "mappers")
	symlink(t, real, dir)
	c := newCatalog(t, catalog.Options{Dir: dir})
	if m := mustModule(t, c, "echo"); m.Active.ID != "echo@1.0.0" {
		t.Fatalf("echo: %+v", m)
	}
	if len(c.Status().Files) != 0 {
		t.Fatalf("files %+v", c.Status().Files)
	}
}

// TestSymlinkLoopIsSkipped: a file that cannot be resolved is skipped on its
// own; the rest of the directory loads (the whole scan used to fail).
func TestSymlinkLoopIsSkipped(t *testing.T) {
	dir := t.TempDir()
	symlink(t, "b.wasm", filepath.Join(dir, "a.wasm"))
	symlink(t, "a.wasm", filepath.Join(dir, "b.wasm"))
	c, reg := echoBeside(t, dir)
	mustSkip(t, c, dir, "a.wasm", "too many links")
	if n := skippedCount(t, reg, "unreadable"); n != 2 {
		t.Errorf("skipped{unreadable} = %v, want 2", n)
	}
}

// TestSkippedFileReplacedLoads: a skipped file replaced by a valid module is
// taken at the next reload.
func TestSkippedFileReplacedLoads(t *testing.T) {
	dir := t.TempDir()
	mkfifo(t, filepath.Join(dir, "echo.wasm"))
	c := newCatalog(t, catalog.Options{Dir: dir})
	mustSkip(t, c, dir, "echo.wasm", "not a regular file")
	drop(t, dir, "echo.wasm", "echo_v1")
	reload(t, c)
	mustModule(t, c, "echo")
	if _, ok := fileState(c.Status(), dir, "echo.wasm"); ok {
		t.Fatalf("echo.wasm still listed: %+v", c.Status().Files)
	}
}
