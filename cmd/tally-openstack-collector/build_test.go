package main

import (
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
	testkit.CopyWorkingTree(t, gitBin, root, tree)

	cmd := exec.Command(makeBin, "build", "WAT2WASM=/nonexistent", "CLANG=/nonexistent")
	cmd.Dir = tree
	cmd.Env = testkit.CleanMakeEnv()
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
