package mappers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// schema is the part of docs/event.schema.json this test reads.
type schema struct {
	Properties map[string]struct {
		Type       string                     `json:"type"`
		Pattern    string                     `json:"pattern"`
		Properties map[string]json.RawMessage `json:"properties"`
	} `json:"properties"`
	Defs map[string]struct {
		Pattern string `json:"pattern"`
	} `json:"$defs"`
}

// TestOutputsMatchSchema checks every expected event of every fixture pair
// against docs/event.schema.json: only members the schema knows, of the type
// it gives, timestamps in its form, and attributes of the declared types.
// (Required members are the Reporting API's check: a fixture of a sample
// without message_id rightly yields an event without event_id.)
func TestOutputsMatchSchema(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "event.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	timeRE := regexp.MustCompile(s.Defs["time"].Pattern)
	attrTypes := map[string]string{}
	for name, raw := range s.Properties["attributes"].Properties {
		var p struct {
			Type string `json:"type"`
			Ref  string `json:"$ref"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		if p.Ref != "" {
			p.Type = "time"
		}
		attrTypes[name] = p.Type
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
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, ev := range doc.Events {
			events++
			for k, v := range ev {
				p, ok := s.Properties[k]
				switch {
				case !ok || k == "source":
					t.Errorf("%s: member %q not allowed in a mapper's event", f, k)
				case p.Type == "string" && !isString(v):
					t.Errorf("%s: %s = %v, want a non-empty string", f, k, v)
				case p.Pattern != "" && !regexp.MustCompile(p.Pattern).MatchString(v.(string)):
					t.Errorf("%s: %s = %q does not match %s", f, k, v, p.Pattern)
				}
			}
			attrs, ok := ev["attributes"].(map[string]any)
			if !ok {
				t.Errorf("%s: attributes missing or not an object", f)
				continue
			}
			// The channel module carries what the publisher sent: its
			// attributes are free, but scalar.
			freeForm := strings.HasPrefix(f, "channel"+string(filepath.Separator))
			for k, v := range attrs {
				switch want := attrTypes[k]; want {
				case "":
					if !freeForm {
						t.Errorf("%s: attribute %q not in the schema", f, k)
					}
					switch v.(type) {
					case string, float64, bool:
					default:
						t.Errorf("%s: attribute %s = %v, want a string, number or boolean", f, k, v)
					}
				case "number":
					if _, ok := v.(float64); !ok {
						t.Errorf("%s: attribute %s = %v, want a number", f, k, v)
					}
				case "string":
					if !isString(v) {
						t.Errorf("%s: attribute %s = %v, want a non-empty string", f, k, v)
					}
				case "time":
					if !isString(v) || !timeRE.MatchString(v.(string)) {
						t.Errorf("%s: attribute %s = %v, want an RFC 3339 UTC time", f, k, v)
					}
				}
				if strings.Contains(strings.ToLower(k), "password") {
					t.Errorf("%s: attribute %s", f, k)
				}
			}
		}
	}
	t.Logf("%d events in %d documents", events, len(outs))
}

func isString(v any) bool {
	s, ok := v.(string)
	return ok && s != ""
}
