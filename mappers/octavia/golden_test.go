package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/mappers/fixture"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.json from the mapper's output")

func mapJSON(in []byte) ([]byte, error) { return sdk.MapJSON(mapOctavia, in) }

// TestGolden maps every testdata/*.in.json natively and compares the result
// with its .out.json; it also fails when a credential of the input reaches
// the output.
func TestGolden(t *testing.T) {
	results, err := fixture.Run("testdata", mapJSON, *update)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		t.Run(r.Case.Name, func(t *testing.T) {
			if r.Err != nil {
				t.Error(r.Err)
			}
		})
	}
}

// TestHostile proves that no input makes the mapper fail: each answer is a
// valid document with at most one event, each with an event_type.
func TestHostile(t *testing.T) {
	for _, in := range fixture.HostileInputs("octavia.loadbalancer.create.end") {
		got, err := mapJSON(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		var doc struct {
			Events []map[string]any `json:"events"`
		}
		if err := json.Unmarshal(got, &doc); err != nil {
			t.Fatalf("%q: output %s is not a document: %v", in, got, err)
		}
		for _, e := range doc.Events {
			// The host refuses an event without an event_type.
			if et, _ := e["event_type"].(string); et == "" {
				t.Errorf("%q: event without event_type: %v", in, e)
			}
		}
		if len(doc.Events) > 1 {
			t.Errorf("%q: %d events, want at most 1", in, len(doc.Events))
		}
	}
}

// TestWorkedExample runs the example pair of docs/writing-mappers.md.
func TestWorkedExample(t *testing.T) {
	results, err := fixture.Run("../testdata/worked-example", mapJSON, *update)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			t.Error(r.Err)
		}
	}
}

// TestClaims checks the manifest with the collector's own matcher: every
// fixture's type is claimed, and none of the real samples in
// ../testdata/unclaimed (versioned nova among them) is.
func TestClaims(t *testing.T) {
	mf := runtime.Manifest{Name: manifest.Name, Version: manifest.Version, EventTypes: manifest.EventTypes}
	own, _ := filepath.Glob(filepath.Join("testdata", "*.in.json"))
	others, _ := filepath.Glob(filepath.Join("..", "testdata", "unclaimed", "*.json"))
	if len(own) == 0 || len(others) == 0 {
		t.Fatalf("fixtures missing: %d own, %d unclaimed", len(own), len(others))
	}
	for _, f := range append(own, others...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			EventType string `json:"event_type"`
		}
		_ = json.Unmarshal(b, &m)
		want := filepath.Dir(f) == "testdata"
		if ok, _ := mf.Match(m.EventType); ok != want {
			t.Errorf("%s: claims %q: %v, want %v", f, m.EventType, ok, want)
		}
	}
}
