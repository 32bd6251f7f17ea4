package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/mappers/internal/builtintest"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

func mapJSON(in []byte) ([]byte, error) { return sdk.MapJSON(mapDesignate, in) }

// mapper is what the golden test and the fuzz target know of the mapper.
var mapper = builtintest.Mapper(fixture.Mapper{
	Map: mapJSON, EventType: "dns.domain.create", MaxEvents: 1, Claims: manifest.EventTypes,
})

// TestGolden runs the pairs of testdata (credential check included), the
// hostile inputs and the manifest's claims: see fixture.Golden.
func TestGolden(t *testing.T) { builtintest.Golden(t, mapper) }

// TestOneEventPerChange: designate publishes a zone change under both of its
// names with the same payload. Of such a pair exactly one is claimed, the
// dns.domain.* one, and it yields one event.
func TestOneEventPerChange(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "dns.domain.update__designate__2.in.json"))
	if err != nil {
		t.Fatal(err)
	}
	twin, err := os.ReadFile(filepath.Join("..", "testdata", "unclaimed", "designate__dns.zone.update__dual__1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var a, b struct {
		EventType string         `json:"event_type"`
		Payload   map[string]any `json:"payload"`
	}
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(twin, &b) != nil || !reflect.DeepEqual(a.Payload, b.Payload) {
		t.Fatal("the pair does not carry the same payload")
	}
	mf := runtime.Manifest{EventTypes: manifest.EventTypes}
	claimed := 0
	for _, et := range []string{a.EventType, b.EventType} {
		if ok, _ := mf.Match(et); ok {
			claimed++
		}
	}
	if claimed != 1 {
		t.Fatalf("%d of %s and %s claimed, want 1", claimed, a.EventType, b.EventType)
	}
	out, err := mapJSON(old)
	if err != nil || bytes.Count(out, []byte(`"event_type"`)) != 1 {
		t.Fatalf("%s, %v: want one event", out, err)
	}
	for _, et := range []string{"dns.zone.create", "dns.zone.update", "dns.zone.delete", "dns.zone.exists"} {
		if ok, _ := mf.Match(et); ok {
			t.Errorf("%s claimed: its dns.domain twin is", et)
		}
	}
}
