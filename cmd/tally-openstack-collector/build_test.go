package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// make build needs Go alone: in a tree holding only the repository's files
// (what a clone has, build outputs left behind) it succeeds with the WAT and C
// tools pointed at nothing, leaves the binary with the built-in mappers inside,
// and builds none of the test modules (those are make test-wasm's).
func TestMakeBuildNeedsGoAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and the mappers in a copy of the tree")
	}
	makeBin := testkit.LookPath(t, "make", "make")
	gitBin := testkit.LookPath(t, "git", "git")
	root := testkit.RepoRoot(t)
	tree := t.TempDir()
	copyTree(t, gitBin, root, tree)

	cmd := exec.Command(makeBin, "build", "WAT2WASM=/nonexistent", "CLANG=/nonexistent")
	cmd.Dir = tree
	cmd.Env = cleanMakeEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make build WAT2WASM=/nonexistent CLANG=/nonexistent: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "/nonexistent") {
		t.Errorf("make build called a WAT or C tool:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(tree, "bin", "tally-openstack-collector")); err != nil {
		t.Fatalf("no binary: %v\n%s", err, out)
	}
	for _, s := range []string{"nova", "cinder", "neutron", "glance", "octavia"} {
		if _, err := os.Stat(filepath.Join(tree, "mappers", "dist", s+".wasm")); err != nil {
			t.Errorf("built-in mapper %s: %v", s, err)
		}
	}
	for _, glob := range []string{"runtime/testdata/*.wasm", "runtime/catalog/testdata/*.wasm", "examples/c-mapper/*.wasm", "wasm-sdk/testdata/*.wasm"} {
		if m, _ := filepath.Glob(filepath.Join(tree, glob)); len(m) > 0 {
			t.Errorf("make build built test modules: %v", m)
		}
	}
	v := exec.Command(filepath.Join(tree, "bin", "tally-openstack-collector"), "version")
	if vout, err := v.CombinedOutput(); err != nil || !strings.Contains(string(vout), "mapper ABI versions") {
		t.Fatalf("the built binary's version: %v\n%s", err, vout)
	}
}

// copyTree copies the files git would put in a clone of the working tree
// (tracked ones as they are now, new ones not ignored) from root to dst.
func copyTree(t *testing.T, gitBin, root, dst string) {
	t.Helper()
	ls := exec.Command(gitBin, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	out, err := ls.Output()
	if err != nil {
		testkit.Missing(t, "git ls-files in %s: %v (the test copies the repository's files; it needs a git checkout)", root, err)
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

// cleanMakeEnv is this process's environment without what an enclosing make
// passed down (its flags and jobserver), so the inner make starts afresh.
func cleanMakeEnv() []string {
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
