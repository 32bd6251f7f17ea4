// Package repocheck holds the repository's own checks: that
// docs/architecture.md describes the tree as it is (its package table, the
// functions its data path names, its import rules) and that the tree keeps
// the conventions that document states (metric names, sentinel errors). It
// has tests only; nothing imports it.
package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// root is the repository's root, seen from this package.
const root = "../.."

// module is the daemon module's path.
const module = "github.com/tally-billing/tally-openstack-collector"

// goFile is one parsed Go file of the tree (not a test).
type goFile struct {
	dir  string // slash-separated, relative to root
	name string // base name
	file *ast.File
}

var (
	treeOnce  sync.Once
	treeFiles []goFile
	treeErr   error
)

// tree parses every Go file of the working tree that is not a test, once.
func tree(t *testing.T) []goFile {
	t.Helper()
	treeOnce.Do(func() {
		fset := token.NewFileSet()
		treeErr = testkit.WalkWorkingTree(root, func(p string) error {
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if testkit.Vanished(err) {
				return nil
			}
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			treeFiles = append(treeFiles, goFile{dir: filepath.ToSlash(rel), name: filepath.Base(p), file: f})
			return nil
		}, "testdata")
	})
	if treeErr != nil {
		t.Fatal(treeErr)
	}
	return treeFiles
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
