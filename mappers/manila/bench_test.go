package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkManila maps testdata/share.extend.end__manila__2.in.json (891 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/manila in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkManila(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/share.extend.end__manila__2.in.json", sdk.MapJSON, mapManila)
}
