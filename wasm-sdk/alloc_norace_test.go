//go:build !wasip1 && !race

// The race detector's instrumentation allocates where the code does not, so
// the allocation counts are checked without -race only (make test-go runs
// every *_norace_test.go).

package sdk_test

import (
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// TestGetManyAllocations: GetMany adds no allocation to MapJSON's one (the
// copy of the output).
func TestGetManyAllocations(t *testing.T) {
	f := func(m *sdk.Message, out *sdk.Output) {
		var v [3]sdk.Value
		m.GetMany(getManyPaths[:3], v[:])
	}
	in := []byte(doc)
	if a := testing.AllocsPerRun(100, func() { _, _ = sdk.MapJSON(f, in) }); a > 1 {
		t.Fatalf("MapJSON with GetMany allocates %v times, want 1 (the copy of the output)", a)
	}
}
