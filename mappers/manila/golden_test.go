package main

import (
	"testing"

	"github.com/tally-billing/tally-openstack-collector/mappers/internal/builtintest"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

func mapJSON(in []byte) ([]byte, error) { return sdk.MapJSON(mapManila, in) }

// mapper is what the golden test and the fuzz target know of the mapper.
var mapper = builtintest.Mapper(fixture.Mapper{
	Map: mapJSON, EventType: "share.create.end", MaxEvents: 1, Claims: manifest.EventTypes,
})

// TestGolden runs the pairs of testdata (credential check included), the
// hostile inputs and the manifest's claims: see fixture.Golden.
func TestGolden(t *testing.T) { builtintest.Golden(t, mapper) }
