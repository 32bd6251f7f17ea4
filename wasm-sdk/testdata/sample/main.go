// Command sample is a small, realistic Go guest (nova compute.instance.*),
// used by the runtime's conformance tests and benchmarks.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/sample"
)

func init() { sdk.Register(sample.Manifest, sample.Map) }

func main() {}
