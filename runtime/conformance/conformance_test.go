package conformance_test

import (
	"os"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/runtime/conformance"
)

func TestWATNoop(t *testing.T) {
	conformance.Run(t, testkit.WAT(t, "../testdata", "noop"), conformance.WithCacheDir(testkit.CacheDir(t)))
}

func TestWATFieldmap(t *testing.T) {
	conformance.Run(t, testkit.WAT(t, "../testdata", "fieldmap"), conformance.WithCacheDir(testkit.CacheDir(t)))
}

func TestGoNova(t *testing.T) {
	nova, err := os.ReadFile("../testdata/nova-compute.instance.exists.json")
	if err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, testkit.BuiltModule(t, "mappers/dist/nova.wasm"), conformance.WithInputs(nova), conformance.WithCacheDir(testkit.CacheDir(t)))
}
