package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

var benchInputs = map[string]string{
	"json":   `{"event_type":"usage.license","channel":{"type":"JSON","published_at":"2026-01-05T10:00:00.123456789Z","uid":1000,"gid":1000},"message":{"id":"b-1","type":"license.checkout","resource_type":"license","resource_id":"matlab","project_id":"p1","attributes":{"seats":1,"feature":"MATLAB"}}}`,
	"string": `{"event_type":"usage.license","channel":{"type":"STRING","published_at":"2026-01-05T10:00:00.123456789Z","uid":1000,"gid":1000},"message":"id=b-1 type=license.checkout resource_type=license resource_id=matlab project_id=p1 seats=1 feature=MATLAB"}`,
}

// BenchmarkMapChannel maps a small usage message natively, indexing the
// envelope included (the module's own work; in wazero add the ABI crossings
// and, guarded, the termination checks). Besides wall time it reports
// cpu-ns/op, the process's CPU time per call, which a loaded machine
// disturbs less.
func BenchmarkMapChannel(b *testing.B) {
	for _, name := range []string{"json", "string"} {
		in := []byte(benchInputs[name])
		b.Run(name, func(b *testing.B) {
			testkit.BenchMap(b, in, sdk.MapJSON, mapChannel)
		})
	}
}
