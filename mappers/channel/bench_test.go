package main

import (
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

var benchInputs = map[string]string{
	"json":   `{"event_type":"usage.license","channel":{"type":"JSON","published_at":"2026-01-05T10:00:00.123456789Z","uid":1000,"gid":1000},"message":{"id":"b-1","type":"license.checkout","resource_type":"license","resource_id":"matlab","project_id":"p1","attributes":{"seats":1,"feature":"MATLAB"}}}`,
	"string": `{"event_type":"usage.license","channel":{"type":"STRING","published_at":"2026-01-05T10:00:00.123456789Z","uid":1000,"gid":1000},"message":"id=b-1 type=license.checkout resource_type=license resource_id=matlab project_id=p1 seats=1 feature=MATLAB"}`,
}

// BenchmarkMapChannel maps a small usage message natively (the module's own
// work; in wazero add the ABI crossings).
func BenchmarkMapChannel(b *testing.B) {
	for name, in := range benchInputs {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := sdk.MapJSON(mapChannel, []byte(in)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
