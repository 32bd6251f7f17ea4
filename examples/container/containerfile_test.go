// Package container holds the Containerfile; its test holds the build
// stage to what `make build` runs.
package container

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// The build stage installs nothing `make build` does not run: every command
// of its recipe (as make prints it without running it) is Go's, make's or
// the base image's.
func TestBuildStageInstallsWhatMakeBuildRuns(t *testing.T) {
	cf := testkit.ReadFile(t, "Containerfile")
	build := regexp.MustCompile(`(?s)FROM \S+ AS build\n(.*?)\nFROM `).FindSubmatch(cf)
	if build == nil {
		t.Fatal("no build stage in the Containerfile")
	}
	stage := strings.ReplaceAll(string(build[1]), "\\\n", " ")
	if !strings.Contains(stage, "make build") {
		t.Fatal("the build stage does not run make build")
	}
	make, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make: %v", err)
	}
	cmd := exec.Command(make, "--no-print-directory", "-n", "-B", "build")
	cmd.Dir = "../.."
	// Under make test this runs inside another make: without its variables,
	// make prints only the commands, as it would in the build stage.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MAKELEVEL" && k != "MFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n -B build: %v\n%s", err, out)
	}
	// What the golang image carries: the Go toolchain, make, git, a shell.
	base := map[string]bool{"go": true, "make": true, "git": true, "mkdir": true, "cp": true, "rm": true}
	ran := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.Contains(f, "=") && !strings.HasPrefix(f, "-") {
				continue // an environment assignment before the command
			}
			ran[f] = true
			if !base[f] {
				t.Errorf("make build runs %q, which the build stage's base image does not have: %s", f, line)
			}
			break
		}
	}
	if !ran["go"] {
		t.Fatalf("make build runs no go command:\n%s", out)
	}
	for _, m := range regexp.MustCompile(`apt-get install\s+([^&;]*)`).FindAllStringSubmatch(stage, -1) {
		for _, pkg := range strings.Fields(m[1]) {
			if strings.HasPrefix(pkg, "-") {
				continue
			}
			if !ran[pkg] {
				t.Errorf("the build stage installs %s, which make build does not run", pkg)
			}
		}
	}
}
