package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkNovaExists maps a 2.5 KB compute.instance.exists of a current
// release natively (indexing the JSON included). The same input through the
// compiled module is measured by BenchmarkBuiltinNovaExists in package mappers.
// Besides wall time it reports cpu-ns/op, the process's CPU time per call: on
// a shared machine the steadier figure.
func BenchmarkNovaExists(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/edge__exists_2024_1.in.json", sdk.MapJSON, mapNova)
}

// BenchmarkNovaVersioned maps the versioned instance.exists of
// testdata/edge__versioned_later_version.in.json (a whole notification,
// message_id included, 1595 bytes) natively: two host lookups of the member list, one to
// tell the format, one to read it. Through the compiled module:
// BenchmarkBuiltin/nova-versioned in package mappers.
func BenchmarkNovaVersioned(b *testing.B) {
	testkit.BenchMapFile(b, "testdata/edge__versioned_later_version.in.json", sdk.MapJSON, mapNova)
}
