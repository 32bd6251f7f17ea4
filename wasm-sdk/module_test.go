//go:build !wasip1

package sdk_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sdkModule is the module path of this SDK (go.mod).
const sdkModule = "github.com/tally-billing/tally-openstack-collector/wasm-sdk"

// docBlock returns the tab-indented block of the package doc (doc.go) that
// follows the line holding after, each line without its "//\t" prefix.
func docBlock(t *testing.T, doc, after string) string {
	t.Helper()
	i := strings.Index(doc, after)
	if i < 0 {
		t.Fatalf("doc.go has no %q", after)
	}
	var b strings.Builder
	started := false
	for _, line := range strings.Split(doc[i:], "\n")[1:] {
		switch {
		case strings.HasPrefix(line, "//\t"):
			started = true
			b.WriteString(strings.TrimPrefix(line, "//\t") + "\n")
		case line == "//" && started:
			b.WriteString("\n")
		case line == "//":
		default:
			if started {
				return strings.TrimSpace(b.String()) + "\n"
			}
		}
	}
	if !started {
		t.Fatalf("doc.go: no code block after %q", after)
	}
	return strings.TrimSpace(b.String()) + "\n"
}

// An author outside this repository: a module of their own (go mod init),
// the SDK from this directory (a replace, where a published version would
// come from the proxy; no network here), the package doc's complete mapper
// built with the doc's command. go mod tidy succeeds, and the module needs
// the SDK alone: the SDK's module requires nothing outside the standard
// library, so an author inherits no requirement of the collector's.
func TestOutsideAuthorBuildsTheDocMapper(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module outside the tree for wasip1")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	sdkDir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`(?m)^\s*require\b`).Match(own) {
		t.Fatalf("the SDK's go.mod requires a module:\n%s", own)
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	src := docBlock(t, string(doc), "# A complete mapper")
	build := strings.Fields(strings.TrimSpace(docBlock(t, string(doc), "Build it with")))
	if len(build) < 4 || build[0] != "GOOS=wasip1" || build[1] != "GOARCH=wasm" || build[2] != "go" {
		t.Fatalf("the doc's build command is not GOOS=wasip1 GOARCH=wasm go ...: %q", build)
	}
	pkgDir := strings.TrimPrefix(build[len(build)-1], "./")

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, pkgDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pkgDir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
	run := func(extra []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(append([]string(nil), env...), extra...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(nil, "mod", "init", "example.com/mappers")
	run(nil, "mod", "edit", "-replace", sdkModule+"="+sdkDir)
	run(nil, "mod", "tidy")
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := regexp.MustCompile(`(?m)^\s*(?:require\s+)?([a-z0-9.-]+\.[a-z]+/\S+) v\S+`).FindAllStringSubmatch(string(mod), -1)
	if len(reqs) != 1 || reqs[0][1] != sdkModule {
		t.Fatalf("go.mod after go mod tidy requires %v, want the SDK alone:\n%s", reqs, mod)
	}
	run(build[:2], append(build[3:len(build)-1], "./"+pkgDir)...)
	out := filepath.Join(dir, "glance.wasm")
	for i, a := range build {
		if a == "-o" && i+1 < len(build) {
			out = filepath.Join(dir, build[i+1])
		}
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
		t.Fatalf("no module built at %s: %v", out, err)
	}
	t.Logf("go.mod:\n%s", mod)
}
