package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RepoRoot answers the repository's top directory: the nearest directory
// above the test's working directory (its package) that holds go.mod.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// RepoPath joins elements to the repository's top directory.
func RepoPath(tb testing.TB, elem ...string) string {
	tb.Helper()
	return filepath.Join(append([]string{RepoRoot(tb)}, elem...)...)
}

// GoBin answers the go command that runs the tests: the one on PATH, else
// the one under /usr/local/go.
func GoBin(tb testing.TB) string {
	tb.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		return "/usr/local/go/bin/go"
	}
	tb.Fatal("the go command is neither on PATH nor under /usr/local/go/bin")
	return ""
}
