package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkTrove maps testdata/trove.instance.create__trove__1.in.json (1065 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/trove in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkTrove(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/trove.instance.create__trove__1.in.json", sdk.MapJSON, mapTrove)
}
