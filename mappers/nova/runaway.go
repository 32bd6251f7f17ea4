//go:build !tally_runaway

package main

import sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"

// runaway does nothing. Built with the tag tally_runaway (runaway_loop.go)
// it loops for ever on a marker: the module the daemon's runaway test builds (cmd/tally-openstack-collector,
// TestRunawayBuiltinNeverFreezes). No release is built with it.
func runaway(sdk.Value) {}
