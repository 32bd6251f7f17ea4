package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkOctavia maps testdata/octavia.loadbalancer.create.end__octavia__1.in.json (1674 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/octavia in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkOctavia(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/octavia.loadbalancer.create.end__octavia__1.in.json", sdk.MapJSON, mapOctavia)
}
