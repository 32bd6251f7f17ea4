package runtime_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// CheckOutput answers what Module.Map answers for the same guest output.
func TestCheckOutput(t *testing.T) {
	for doc, want := range map[string]runtime.Reason{
		`{"events":[]}`: "",
		`{"events":[{"event_type":"a","resource_id":"r","source":{"mapper":"evil@6.6.6"}}]}`: "",
		`{"error":"no"}`:                   runtime.ReasonGuestError,
		`not json`:                         runtime.ReasonInvalidOutput,
		`[]`:                               runtime.ReasonInvalidOutput,
		`{"events":{}}`:                    runtime.ReasonInvalidOutput,
		`{"events":[1]}`:                   runtime.ReasonInvalidOutput,
		`{"events":[{"resource_id":"r"}]}`: runtime.ReasonInvalidOutput,
		`{"events":[{"event_type":""}]}`:   runtime.ReasonInvalidOutput,
		`{"events":[{"event_type":7}]}`:    runtime.ReasonInvalidOutput,
		`{"events":[` + strings.Repeat(`{"event_type":"a"},`, runtime.DefaultMaxOutputBytes/19) + `{"event_type":"a"}]}`: runtime.ReasonInvalidOutput,
	} {
		res, err := runtime.CheckOutput([]byte(doc), nil, "m@1.0.0")
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
