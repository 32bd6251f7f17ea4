//go:build !race

// The deadline is the product's, measured on the product's code: the race
// detector's instrumentation slows the host's side of a call (the copy into
// guest memory, the lookups, the check of the output) several times over, so
// this test runs without it (make test-go runs every *_norace_test.go).

package main

import (
	"context"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// TestBulkNotificationWithinTheDeadline maps the bulk notification of
// bulkPorts through the compiled module, guarded, under the default mapper
// call timeout (runtime.DefaultCallTimeout): all 1,000 ports become events.
// Before member lookups were indexed, every lookup below payload walked the
// 50,000 padding members again and the call took seconds (in the daemon a
// first delivery then ends the process with status 70). The instance has
// mapped the same notification once before, under a long deadline, as a
// daemon's instances have mapped others: what is timed is the mapping, not
// the growth of a new instance's memory to the size of the input.
func TestBulkNotificationWithinTheDeadline(t *testing.T) {
	ctx := runtime.GuardedCall(context.Background())
	m := loadNeutron(t)
	var idx jsonindex.Index
	mapBulk(t, ctx, m, &idx, 0) // a new instance, under 30 s
	mapBulk(t, ctx, m, &idx, runtime.DefaultCallTimeout)
}
