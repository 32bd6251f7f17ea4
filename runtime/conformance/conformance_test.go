package conformance_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/conformance"
)

func module(t *testing.T, path string) []byte {
	t.Helper()
	if b, err := os.ReadFile(path); err == nil {
		return b
	}
	if filepath.Ext(path) == ".wasm" {
		wat := path[:len(path)-len(".wasm")] + ".wat"
		if _, err := os.Stat(wat); err == nil {
			out := filepath.Join(t.TempDir(), "m.wasm")
			if msg, err := exec.Command("wat2wasm", "-o", out, wat).CombinedOutput(); err != nil {
				t.Fatalf("wat2wasm: %v %s", err, msg)
			}
			b, _ := os.ReadFile(out)
			return b
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing (run make wasm)", path)
	}
	t.Skipf("%s is missing (run make wasm)", path)
	return nil
}

func TestWATNoop(t *testing.T) { conformance.Run(t, module(t, "../testdata/noop.wasm")) }

func TestWATFieldmap(t *testing.T) { conformance.Run(t, module(t, "../testdata/fieldmap.wasm")) }

func TestGoNova(t *testing.T) {
	nova, err := os.ReadFile("../testdata/nova-compute.instance.exists.json")
	if err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, module(t, "../../mappers/dist/nova.wasm"), conformance.WithInputs(nova))
}
