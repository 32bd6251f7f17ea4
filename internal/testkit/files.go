package testkit

import (
	"os"
	"path/filepath"
	"testing"
)

// CopyDir copies the files of src (not its subdirectories) into a new
// directory of the test's, made 0700 with files 0600 as the outbox keeps
// them, and answers its path. For fixtures a test writes to, such as a
// golden outbox store, which Open changes.
func CopyDir(tb testing.TB, src string) string {
	tb.Helper()
	dst := filepath.Join(tb.TempDir(), filepath.Base(src))
	if err := os.Mkdir(dst, 0o700); err != nil {
		tb.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	if len(ents) == 0 {
		tb.Fatalf("%s is empty", src)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b := ReadFile(tb, filepath.Join(src, e.Name()))
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dst
}

// ReadFile answers the content of the file at path, or fails the test.
func ReadFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchDir is a new directory under $TALLY_OSC_BENCH_DIR when it is set (to
// compare filesystems in a benchmark, a tmpfs against the disk), removed
// when the test ends; else the test's temp dir.
func BenchDir(tb testing.TB) string {
	tb.Helper()
	root := os.Getenv("TALLY_OSC_BENCH_DIR")
	if root == "" {
		return tb.TempDir()
	}
	d, err := os.MkdirTemp(root, "bench")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// ReadGlob answers the content of every file that matches pattern, by path,
// or fails the test when none does.
func ReadGlob(tb testing.TB, pattern string) map[string][]byte {
	tb.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		tb.Fatalf("%s: %v (%d files)", pattern, err, len(paths))
	}
	out := make(map[string][]byte, len(paths))
	for _, p := range paths {
		out[p] = ReadFile(tb, p)
	}
	return out
}
