package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/mappers/internal/builtintest"
	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

func mapJSON(in []byte) ([]byte, error) { return sdk.MapJSON(mapNeutron, in) }

// mapper is what the golden test and the fuzz target know of the mapper.
var mapper = builtintest.Mapper(fixture.Mapper{
	Map: mapJSON, EventType: "network.create.end", MaxEvents: 5, Claims: manifest.EventTypes,
})

// TestGolden runs the pairs of testdata (credential check included), the
// hostile inputs and the manifest's claims: see fixture.Golden.
func TestGolden(t *testing.T) { builtintest.Golden(t, mapper) }

// TestPreSharedKeyNotCopied: an IPsec site connection carries its pre-shared
// key as "psk", a name the shared credential check does not know. No event
// made of a fixture may hold the key.
func TestPreSharedKeyNotCopied(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "ipsec_site_connection.*.in.json"))
	files = append(files, filepath.Join("testdata", "edge__vpn_hostile.in.json"))
	n := 0
	for _, f := range files {
		in, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var msg struct {
			Payload struct {
				Conn struct {
					PSK string `json:"psk"`
				} `json:"ipsec_site_connection"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(in, &msg); err != nil || msg.Payload.Conn.PSK == "" {
			t.Fatalf("%s: no psk (%v)", f, err)
		}
		out, err := mapJSON(in)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte(msg.Payload.Conn.PSK)) || bytes.Contains(out, []byte(`"psk"`)) {
			t.Errorf("%s: the pre-shared key reached the event: %s", f, out)
		}
		n++
	}
	if n < 3 {
		t.Fatalf("only %d samples with a pre-shared key", n)
	}
}
