package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
)

// buildNovaVariant builds the nova module from its source with one line
// replaced (old by new), through an overlay of its main.go, and answers the
// path of the .wasm.
func buildNovaVariant(t *testing.T, old, new string) string {
	t.Helper()
	src := testkit.RepoPath(t, "mappers", "nova", "main.go")
	b := testkit.ReadFile(t, src)
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("mappers/nova/main.go has no %q", old)
	}
	dir := t.TempDir()
	mod := filepath.Join(dir, "main.go")
	if err := os.WriteFile(mod, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{src: mod}})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "nova-variant.wasm")
	cmd := exec.Command(testkit.GoBin(t), "build", "-buildmode=c-shared", "-trimpath", "-overlay", filepath.Join(dir, "overlay.json"),
		"-o", out, "./mappers/nova")
	cmd.Dir = testkit.RepoPath(t)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the nova variant: %v\n%s", err, msg)
	}
	return out
}

// captureNova publishes nova's fixture notifications with the real oslo
// Notifier and captures them with --dump; it answers the capture file.
func captureNova(t *testing.T, b bins) (string, int) {
	t.Helper()
	testkit.RequireBroker(t)
	testkit.NeedOslo(t)
	v := testkit.NewVhost(t)
	v.DeclareExchanges(t, false, "nova")
	capture := filepath.Join(t.TempDir(), "nova.dump")
	f, err := os.Create(capture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var logs testkit.SyncBuffer
	dump := exec.Command(b.collector, "--dump")
	dump.Env = append(os.Environ(), "TALLY_OSC_TRANSPORT_URL="+v.URL(), "TALLY_OSC_EXCHANGES=nova", "TALLY_OSC_LOG_FORMAT=json")
	dump.Stdout, dump.Stderr = f, &logs
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = dump.Process.Signal(syscall.SIGTERM)
		_ = dump.Wait()
	}()
	testkit.WaitFor(t, 30*time.Second, "the dump bound to nova", func() bool { return strings.Contains(logs.String(), "dump bound") })
	all, err := filepath.Glob(testkit.RepoPath(t, "mappers", "nova", "testdata", "*.in.json"))
	if err != nil || len(all) < 10 {
		t.Fatalf("nova fixtures: %v (%d)", err, len(all))
	}
	// The odd values' pair holds 1e999, which Python's json reads as an
	// infinity and writes as Infinity, not JSON: the capture would not hold
	// it as a notification.
	files := slices.DeleteFunc(all, func(f string) bool { return strings.Contains(f, "odd_values") })
	ids := testkit.OsloNotify(t, append([]string{"--url", v.OsloURL(), "--exchange", "nova"}, files...)...)
	testkit.WaitFor(t, 30*time.Second, "every notification in the capture", func() bool {
		b, _ := os.ReadFile(capture)
		return bytes.Count(b, []byte("\n")) >= len(ids)
	})
	return capture, len(ids)
}

// map --diff between the built-in nova module and copies of it built from
// modified source, on notifications the real oslo publisher sent and --dump
// captured: a changed billing quantity fails the gate, a changed descriptive
// member is reported and passes, the same module changes nothing.
func TestMapDiffCatchesBillingChange(t *testing.T) {
	b := buildBinaries(t)
	capture, n := captureNova(t, b)
	env := []string{"TALLY_OSC_MAPPER_CACHE_DIR=" + testkit.CacheDir(t)}
	diff := func(newMod string) (string, int) {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(b.collector, "map", "--diff", "nova", newMod, "--examples", "2", capture)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
		if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
			t.Fatalf("map --diff: %v", err)
		}
		code := cmd.ProcessState.ExitCode()
		t.Logf("map --diff nova %s (exit %d):\n%s%s", filepath.Base(newMod), code, stdout.String(), stderr.String())
		return stdout.String(), code
	}

	// vcpus read from the memory: a billing member changes.
	out, code := diff(buildNovaVariant(t, `a.Quantity("vcpus", v[pVCPUs])`, `a.Quantity("vcpus", v[pMemoryMB])`))
	if code != 1 || !strings.Contains(out, "attributes.vcpus") || !strings.Contains(out, "(billing)") ||
		!strings.Contains(out, "billing changes: attributes.vcpus") || !strings.Contains(out, " -> ") {
		t.Fatalf("a changed vcpus was not caught (exit %d)", code)
	}
	if !strings.Contains(out, ": "+strconv.Itoa(n)+" notifications") {
		t.Errorf("the capture of %d notifications was not read whole", n)
	}

	// The flavor's name under another member: reported, not a billing change.
	out, code = diff(buildNovaVariant(t, `openstack.WriteStr(a, "flavor_name", v[pFlavorName])`, `openstack.WriteStr(a, "flavor", v[pFlavorName])`))
	if code != 0 || !strings.Contains(out, "attributes.flavor_name") || !strings.Contains(out, "no member billing reads changed") {
		t.Fatalf("a renamed descriptive member: exit %d", code)
	}

	// The module against itself, as a file: nothing changes.
	testkit.BuiltModule(t, "mappers/dist/nova.wasm")
	out, code = diff(testkit.RepoPath(t, "mappers", "dist", "nova.wasm"))
	if code != 0 || strings.Contains(out, "members changed") || !strings.Contains(out, "no member billing reads changed") {
		t.Fatalf("the module against itself: exit %d", code)
	}
}
