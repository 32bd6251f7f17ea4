package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// A drop-in directory holding a link to /dev/zero, a FIFO named x.wasm and a
// file over MAPPER_MAX_FILE_MIB: the collector starts and becomes ready with
// the valid module beside them, shows and counts the three as skipped, takes
// a module dropped in later, and stops within its budget. Before, the link
// took it to 2.8 GiB and out of memory at every start, and the FIFO held
// every reload and the stop.
func TestEndToEndHostileMapperDirectory(t *testing.T) {
	dir := t.TempDir()
	dropIn(t, dir, "echo_v1", "echo")
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "x.wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	big, err := os.Create(filepath.Join(dir, "big.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(2<<20 + 1); err != nil {
		t.Fatal(err)
	}
	_ = big.Close()
	c, _, _ := novaCollector(t, "TALLY_OSC_MAPPERS_DIR="+dir,
		"TALLY_OSC_MAPPER_MAX_FILE_MIB=2")
	c.start(t)
	c.waitReady(t)

	m := c.metrics(t)
	for _, reason := range []string{"outside_dir", "not_regular", "too_large"} {
		if n := sum(m, "tally_collector_mapper_files_skipped_total", `reason="`+reason+`"`); n != 1 {
			t.Errorf("files skipped, %s: %v, want 1", reason, n)
		}
	}
	out := c.cli(t, "mappers")
	for _, want := range []string{"echo@1.0.0", "zero.wasm: skipped", "x.wasm: skipped", "big.wasm: skipped", "not a regular file (a named pipe)"} {
		if !strings.Contains(out, want) {
			t.Errorf("mappers view lacks %q:\n%s", want, out)
		}
	}

	dropIn(t, dir, "special", "special")
	testkit.WaitFor(t, 60*time.Second, "special.wasm loaded beside the skipped files", func() bool {
		return strings.Contains(c.cli(t, "mappers"), "special@")
	})
	pid := c.p.cmd.Process.Pid
	// The skipped files cost nothing; the two small drop-ins are counted
	// as built-in modules are (docs/operations.md, the memory budget).
	compiled := int(sum(c.metrics(t), "tally_collector_mapper_builtins_compiled")) + 2
	hwm, budget := int64(procStatus(t, pid, "VmHWM"))<<10, residentBudget(compiled, budgetInputs{})
	t.Logf("collector peak resident set (VmHWM): %d MiB (budget %d MiB)", hwm>>20, budget>>20)
	if hwm > budget {
		t.Errorf("peak resident set %d MiB, over the documented budget of %d MiB", hwm>>20, budget>>20)
	}
	code, took := c.p.stop(t, 40*time.Second)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	t.Logf("stopped in %s", took)
}
