package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkGlance maps testdata/image.upload__ceilometer__2.in.json (784 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/glance in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkGlance(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/image.upload__ceilometer__2.in.json", sdk.MapJSON, mapGlance)
}
