package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkSwift maps testdata/objectstore.http.request__ceilometermiddleware__1.in.json (1451 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/swift in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkSwift(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/objectstore.http.request__ceilometermiddleware__1.in.json", sdk.MapJSON, mapSwift)
}
