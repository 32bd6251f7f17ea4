package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkNeutron maps testdata/port.create.end__ceilometer__1.in.json (1025 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/neutron in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkNeutron(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/port.create.end__ceilometer__1.in.json", sdk.MapJSON, mapNeutron)
}
