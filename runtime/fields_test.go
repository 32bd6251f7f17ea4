package runtime_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tally-billing/tally-openstack-collector/runtime"
)

// TestFieldsImport runs the WAT module testdata/fields.wat, which calls the
// batch lookup import tally.fields: one call with four paths (one of them
// outside guest memory) and two malformed calls (the result table outside
// memory, a negative count), each answered -1 without writing anything.
func TestFieldsImport(t *testing.T) {
	e := newEngine(t, runtime.Config{})
	for _, g := range []runtime.Guard{runtime.GuardAlways, runtime.GuardNever, runtime.GuardWatched} {
		m := load(t, e, "fields", runtime.WithGuard(g))
		msg := `{"event_type":"compute.instance.exists","payload":{"a":1,"instance_id":"i-\"1\""}}`
		res, err := m.Map(context.Background(), index(t, msg), src)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Events) != 1 {
			t.Fatalf("events = %s", res.Events)
		}
		var ev struct {
			EventType  string `json:"event_type"`
			Attributes struct{ ID, K, N string }
		}
		if err := json.Unmarshal(res.Events[0], &ev); err != nil {
			t.Fatal(err)
		}
		a := ev.Attributes
		if ev.EventType != "compute.instance.exists" || a.ID != `i-"1"` || a.K != "2200" || a.N != "4--" {
			t.Fatalf("guard %v: event %s", g, res.Events[0])
		}
		// Input that is not an object: every path answers missing, so the
		// module finds no event_type and answers its error.
		_, err = m.Map(context.Background(), index(t, `"just a string"`), src)
		if me, ok := err.(*runtime.MapError); !ok || me.Reason != runtime.ReasonGuestError {
			t.Fatalf("non-object input: %v, want the module's guest error", err)
		}
	}
}
