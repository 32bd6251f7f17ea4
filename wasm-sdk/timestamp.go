package sdk

import "github.com/tally-billing/tally-openstack-collector/wasm-sdk/timestamp"

// The conversion of timestamps lives in package timestamp, shared with the
// host (tally.emit); these names keep the SDK's tests where they were.
var (
	appendTimestamp = timestamp.Append
	appendNaive     = timestamp.Naive
	appendGeneral   = timestamp.General
)
