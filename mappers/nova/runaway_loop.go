//go:build tally_runaway

package main

import sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"

// spins is written by the loop, so that it is not optimised away.
var spins uint64

// runaway loops for ever, without a call, when payload.host is
// "loop-forever": a built-in module that runs away, for the daemon's runaway
// test only (the tag tally_runaway; runaway.go is the module shipped).
func runaway(host sdk.Value) {
	if !host.Equal("loop-forever") {
		return
	}
	for {
		spins++
	}
}
