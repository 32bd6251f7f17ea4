// Command noop is the smallest Go guest: it claims one event type and answers
// every call with {"events":[]}. Benchmarks use it to measure the bare ABI
// round trip of a Go module.
package main

import sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"

func init() {
	sdk.Register(sdk.Manifest{
		Name:       "noop",
		Version:    "1.0.0",
		EventTypes: []string{"*"},
	}, func(*sdk.Message, *sdk.Output) {})
}

func main() {}
