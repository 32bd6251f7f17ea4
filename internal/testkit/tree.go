package testkit

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// CopyWorkingTree copies the files git would put in a clone of the working
// tree (tracked ones as they are now, new ones not ignored) from root to dst,
// for a test that builds the project as a release is built. gitBin is git
// (LookPath).
func CopyWorkingTree(t testing.TB, gitBin, root, dst string) {
	t.Helper()
	ls := exec.Command(gitBin, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	out, err := ls.Output()
	if err != nil {
		Missing(t, "git ls-files in %s: %v (the test copies the repository's files; it needs a git checkout)", root, err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or not a plain file
		}
		d := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(src, d, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// CleanMakeEnv is this process's environment without what an enclosing make
// passed down (its flags and jobserver), so the inner make starts afresh.
func CleanMakeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TALLY_OSC_TEST_CACHE":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// WalkWorkingTree calls file with the path of each file below root, the
// working tree, in lexical order. It leaves out the directories git, the
// caches and the builds keep (.git, .cache, bin, node_modules) and those
// named in skipDirs, and passes over an entry that vanished during the walk.
// An error file answers ends the walk with it.
func WalkWorkingTree(root string, file func(path string) error, skipDirs ...string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if Vanished(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case name == ".git", name == ".cache", name == "bin", name == "node_modules", slices.Contains(skipDirs, name):
				return filepath.SkipDir
			}
			return nil
		}
		return file(p)
	})
}

// Vanished reports an entry that went away while a walk of the working tree
// read it: the packages' tests run side by side, and a test or a build may
// remove a file it wrote in the tree (a module compiled into testdata, a
// temporary file renamed into place). It is not part of the tree.
func Vanished(err error) bool {
	return errors.Is(err, fs.ErrNotExist)
}
