package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkIronic maps testdata/baremetal.node.provision_set.start__ironic__1.in.json (2164 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/ironic in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkIronic(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/baremetal.node.provision_set.start__ironic__1.in.json", sdk.MapJSON, mapIronic)
}
