package main

import (
	"bytes"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/mappers/internal/builtintest"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

func mapJSON(in []byte) ([]byte, error) { return sdk.MapJSON(mapChannel, in) }

// mapper is what the golden test and the fuzz target know of the mapper.
var mapper = builtintest.Mapper(fixture.Mapper{
	Map: mapJSON, EventType: "usage", MaxEvents: maxEvents, Claims: manifest.EventTypes,
	FreeForm: true, Refuses: true,
})

// TestGolden runs the pairs of testdata (credential check included), the
// hostile inputs and the manifest's claims: see fixture.Golden.
func TestGolden(t *testing.T) { builtintest.Golden(t, mapper) }

func TestActionOf(t *testing.T) {
	for in, want := range map[string]string{
		"usage": "usage", "license.checkout": "checkout", "slurm.job.end": "job",
		"backup.run.start": "run", "": "",
	} {
		if got := actionOf(in); got != want {
			t.Errorf("actionOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSplitPairs(t *testing.T) {
	splitPairs(`a=1  b="two words" c="q\"uote" flag d= e=x=y`)
	got := pairs
	want := [][2]string{{"a", "1"}, {"b", "two words"}, {"c", `q"uote`}, {"flag", "true"}, {"d", ""}, {"e", "x=y"}}
	if len(got) != len(want) {
		t.Fatalf("%q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%d: %q, want %q", i, got[i], want[i])
		}
	}
}

// A channel message of type JSON that is neither an object nor an array of
// objects is answered with an error: the collector dead-letters it.
func TestBadShapeIsAnError(t *testing.T) {
	in := `{"event_type":"usage","channel":{"type":"JSON","published_at":"2026-01-05T10:00:00Z","uid":1000,"gid":1000},"message":42}`
	out, err := mapJSON([]byte(in))
	if err == nil && !bytes.Contains(out, []byte(`"error"`)) {
		t.Fatalf("no error: %s", out)
	}
}
