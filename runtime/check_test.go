package runtime_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// validEvent is an event that keeps the contract, for tests to vary.
const validEvent = `{"event_id":"e1","timestamp":"2024-05-01T12:00:00Z","event_type":"a","service":"s",` +
	`"resource_type":"r","resource_id":"r1","project_id":"p1","action":"x","attributes":{}}`

// CheckOutput answers what Module.Map answers for the same guest output.
func TestCheckOutput(t *testing.T) {
	evil := strings.Replace(validEvent, `"attributes":{}`, `"attributes":{},"source":{"mapper":"evil@6.6.6"}`, 1)
	for doc, want := range map[string]runtime.Reason{
		`{"events":[]}`:                      "",
		`{"events":[` + evil + `]}`:          "",
		`{"error":"no"}`:                     runtime.ReasonGuestError,
		`not json`:                           runtime.ReasonInvalidOutput,
		`[]`:                                 runtime.ReasonInvalidOutput,
		`{"events":{}}`:                      runtime.ReasonInvalidOutput,
		`{"events":[1]}`:                     runtime.ReasonInvalidOutput,
		`{"events":[{"resource_id":"r"}]}`:   runtime.ReasonInvalidEvent,
		`{"events":[{"event_type":""}]}`:     runtime.ReasonInvalidEvent,
		`{"events":[{"event_type":7}]}`:      runtime.ReasonInvalidEvent,
		`{"events":[` + validEvent + `,{}]}`: runtime.ReasonInvalidEvent,
		`{"events":[` + strings.Repeat(validEvent+",", runtime.DefaultMaxOutputBytes/len(validEvent)) + validEvent + `]}`: runtime.ReasonInvalidOutput,
	} {
		res, err := runtime.CheckOutput([]byte(doc), nil, "m@1.0.0", runtime.Source{})
		var me *runtime.MapError
		switch {
		case want == "" && err != nil:
			t.Errorf("%.60s: %v", doc, err)
		case want != "" && (!errors.As(err, &me) || me.Reason != want):
			t.Errorf("%.60s: err %v, want reason %s", doc, err, want)
		}
		for _, ev := range res.Events {
			if !strings.Contains(string(ev), `"mapper":"m@1.0.0"`) || strings.Contains(string(ev), "evil") {
				t.Errorf("%.60s: event %s", doc, ev)
			}
		}
	}
}
