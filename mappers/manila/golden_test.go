package main

import (
	"flag"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.json from the mapper's output")

func mapJSON(in []byte) ([]byte, error) { return sdk.MapJSON(mapManila, in) }

// mapper is what the golden test and the fuzz target know of the mapper.
var mapper = fixture.Mapper{
	Map: mapJSON, EventType: "share.create.end", MaxEvents: 1,
	Claims: manifest.EventTypes, Unclaimed: "../testdata/unclaimed",
	Schema: "../../docs/event.schema.json",
}

// TestGolden runs the pairs of testdata (credential check included), the
// hostile inputs and the manifest's claims: see fixture.Golden.
func TestGolden(t *testing.T) {
	fixture.Golden(t, "testdata", mapper, *update)
}
