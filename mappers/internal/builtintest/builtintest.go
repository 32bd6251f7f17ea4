// Package builtintest holds what the tests of every built-in mapper below
// mappers/ share: the -update flag, the places of the unclaimed samples and
// of the event schema, and the golden test over the mapper's testdata. Only
// test files import it.
//
//	func mapJSON(in []byte) ([]byte, error) { return sdk.MapJSON(mapGlance, in) }
//
//	var mapper = builtintest.Mapper(fixture.Mapper{
//		Map: mapJSON, EventType: "image.upload", MaxEvents: 1, Claims: manifest.EventTypes,
//	})
//
//	func TestGolden(t *testing.T) { builtintest.Golden(t, mapper) }
//
//	func FuzzMap(f *testing.F) { fixture.Fuzz[*testing.T](f, "testdata", mapper) }
package builtintest

import (
	"flag"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
)

// Update is the -update flag of a built-in mapper's tests: with it the
// expected documents are rewritten from what the mapper makes of the inputs.
var Update = flag.Bool("update", false, "rewrite testdata/*.out.json from the mapper's output")

// Mapper returns m, which names the mapping, the manifest's claims and what
// else is particular to the mapper, with what every built-in's golden test
// and fuzz target check against in common: the samples of
// mappers/testdata/unclaimed, which no claim may match, and
// docs/event.schema.json, which every event must pass. (The package stays
// on the host's side: it takes the claims, not the guest SDK's manifest.)
func Mapper(m fixture.Mapper) fixture.Mapper {
	m.Unclaimed = "../testdata/unclaimed"
	m.Schema = "../../docs/event.schema.json"
	return m
}

// Golden runs fixture.Golden on the pairs of the mapper's testdata (the
// credential check included), the hostile inputs and the manifest's claims;
// with -update it rewrites the expected documents instead.
func Golden(t *testing.T, m fixture.Mapper) {
	t.Helper()
	fixture.Golden(t, "testdata", m, *Update)
}
