//go:build !wasip1

package sdk_test

import (
	"errors"
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// A map function that never stops asking for fields is stopped at the
// native lookup budget, deterministically, and answered as an error; one that
// stays within it is not, and the runner is usable again afterwards.
func TestMapJSONStopsALoopAtTheLookupBudget(t *testing.T) {
	lookups := 0
	loop := func(m *sdk.Message, out *sdk.Output) {
		for m.Get("payload.host").Equal("loop-forever") {
			lookups++
		}
		out.Event().Str("event_type", "x")
	}
	doc, err := sdk.MapJSON(loop, []byte(`{"payload":{"host":"loop-forever"}}`))
	if !errors.Is(err, sdk.ErrLookupBudget) {
		t.Fatalf("err = %v, doc %s; want ErrLookupBudget", err, doc)
	}
	if lookups != sdk.MaxNativeLookups {
		t.Fatalf("%d lookups answered, want %d", lookups, sdk.MaxNativeLookups)
	}
	many := func(m *sdk.Message, out *sdk.Output) {
		vals := make([]sdk.Value, sdk.MaxNativeLookups)
		m.GetMany(make([]string, sdk.MaxNativeLookups), vals)
		out.Event().Str("event_type", "x")
	}
	if doc, err := sdk.MapJSON(many, []byte(`{"payload":{"host":"h"}}`)); err != nil {
		t.Fatalf("%d lookups refused: %v %s", sdk.MaxNativeLookups, err, doc)
	}
	if doc, err := sdk.MapJSON(loop, []byte(`{"payload":{"host":"h"}}`)); err != nil || string(doc) != `{"events":[{"event_type":"x"}]}` {
		t.Fatalf("after the budget: %s %v", doc, err)
	}
}
