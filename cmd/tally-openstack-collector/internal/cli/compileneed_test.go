package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// compiled answers the modules compiled into the cache dir.
func compiled(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// TestCommandsCompileOnlyWhatTheInputNeeds: map, mapper test and map --diff
// of nova notifications compile nova and no other built-in module: the
// manifests the build recorded route without compiling. Each runs on a
// compilation cache of its own, empty at first, whose entries show what was
// compiled; run again, each compiles nothing more.
func TestCommandsCompileOnlyWhatTheInputNeeds(t *testing.T) {
	const fixtures = "../../../../mappers/nova/testdata"
	in, err := os.ReadFile(filepath.Join(fixtures, "compute.instance.create.end__almanach__1.in.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"map", string(in), []string{"map"}},
		{"mapper test", "", []string{"mapper", "test", fixtures}},
		{"map --diff", string(in), []string{"map", "--diff", "nova", "nova"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			env := []string{"TALLY_OSC_MAPPER_CACHE_DIR=" + dir}
			for run := 1; run <= 2; run++ {
				code, out, errOut := runCmd(t, c.stdin, env, c.args...)
				if code != 0 {
					t.Fatalf("run %d: exit %d\n%s\n%s", run, code, out, errOut)
				}
				if c.name == "map" && !strings.Contains(errOut, "nova  read 1") {
					t.Fatalf("run %d: not read by nova:\n%s", run, errOut)
				}
				if n := compiled(t, dir); n != 1 {
					t.Fatalf("run %d: %d modules compiled, want 1 (nova)", run, n)
				}
			}
		})
	}
}
