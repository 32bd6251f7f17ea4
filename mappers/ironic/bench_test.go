package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkIronic maps testdata/edge__node_later_version.in.json (1086 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/ironic in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkIronic(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/edge__node_later_version.in.json", sdk.MapJSON, mapIronic)
}
