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
