package mappers

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime/fixture"
)

// TestOutputsMatchSchema checks every expected event of every fixture pair
// against docs/event.schema.json (fixture.Schema.CheckEvent): only members the
// schema knows, of the type it gives, timestamps in its form, and attributes
// of the declared types (any scalar attribute for the channel module and for
// a drop-in's directory). (Required members are the Reporting API's check: a
// fixture of a sample without message_id rightly yields an event without
// event_id.)
func TestOutputsMatchSchema(t *testing.T) {
	s, err := fixture.LoadSchema(filepath.Join("..", "docs", "event.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	builtin, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	outs, _ := filepath.Glob(filepath.Join("*", "testdata", "*.out.json"))
	more, _ := filepath.Glob(filepath.Join("testdata", "*", "*.out.json"))
	outs = append(outs, more...)
	if len(outs) < 100 {
		t.Fatalf("only %d expected documents found", len(outs))
	}
	events := 0
	for _, f := range outs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Events []map[string]any `json:"events"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// The channel module carries what the publisher sent: its
		// attributes are free, but scalar. So are those of a mapper
		// directory that is no built-in's (one `mapper new` wrote): a
		// drop-in for a resource type of its own, which the schema's
		// description of attributes allows members of its own.
		dir, _, _ := strings.Cut(f, string(filepath.Separator))
		freeForm := dir == "channel" || (dir != "testdata" && builtin[dir+".wasm"] == nil)
		for _, ev := range doc.Events {
			events++
			for _, e := range s.CheckEvent(ev, freeForm) {
				t.Errorf("%s: %s", f, e)
			}
		}
	}
	t.Logf("%d events in %d documents", events, len(outs))
}
