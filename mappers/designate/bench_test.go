package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkDesignate maps testdata/dns.domain.update__designate__2.in.json (1163 bytes)
// natively, indexing the JSON included. The same input through the compiled
// module is BenchmarkBuiltin/designate in package mappers. cpu-ns/op is the
// process's CPU time per call, the steadier figure on a shared machine.
func BenchmarkDesignate(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/dns.domain.update__designate__2.in.json", sdk.MapJSON, mapDesignate)
}
