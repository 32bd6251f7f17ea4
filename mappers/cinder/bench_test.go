package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkCinder maps testdata/volume.create.end__ceilometer__1.in.json (742 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/cinder in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkCinder(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/volume.create.end__ceilometer__1.in.json", sdk.MapJSON, mapCinder)
}
