package main

import (
	"os"
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// BenchmarkNovaExists maps a 2.5 KB compute.instance.exists of a current
// release natively (indexing the JSON included). The same input through the
// compiled module is measured by BenchmarkBuiltinNovaExists in package mappers.
func BenchmarkNovaExists(b *testing.B) {
	in, err := os.ReadFile("testdata/edge__exists_2024_1.in.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sdk.MapJSON(mapNova, in); err != nil {
			b.Fatal(err)
		}
	}
}
