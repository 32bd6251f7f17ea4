package plog

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/rs/zerolog"

	"github.com/tally-billing/tally-openstack-collector/internal/testkit"
	"github.com/tally-billing/tally-openstack-collector/mappers"
	"github.com/tally-billing/tally-openstack-collector/runtime"
	"github.com/tally-billing/tally-openstack-collector/runtime/pipeline"
)

// A listener whose chain holds the real nova module, run in wazero: an oslo
// notification sent as a fragmented UDP message is mapped by it, with the
// routing key from an rk: tag.
func TestUDPNotificationThroughRealModule(t *testing.T) {
	mods, err := mappers.Builtin()
	if err != nil || mods["nova.wasm"] == nil {
		testkit.Missing(t, "the built-in mappers are not built: run make wasm (make build and make test build them): %v", err)
	}
	ctx := context.Background()
	eng, err := runtime.NewEngine(ctx, runtime.Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(ctx) })
	nova, err := eng.Load(ctx, "builtin:nova.wasm", mods["nova.wasm"])
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile("testdata/nova-compute.instance.exists.json")
	if err != nil {
		t.Fatal(err)
	}
	var note struct {
		MessageID string `json:"message_id"`
	}
	if err := json.Unmarshal(body, &note); err != nil || note.MessageID == "" {
		t.Fatalf("fixture: %v", err)
	}

	o := udpOnly()
	o.Listeners[0].Mappers = []pipeline.Mapper{nova}
	h := newHarness(t, 0, o)
	c := h.dial(0)
	c.FragmentSize = 512 // several fragments
	if err := c.Send(body, "kt:nova", "rk:notifications.info"); err != nil {
		t.Fatal(err)
	}
	evs := h.events(1)
	ev := evs[0]
	src := ev["source"].(map[string]any)
	if ev["event_type"] != "compute.instance.exists" || ev["event_id"] != note.MessageID {
		t.Fatalf("event %v", ev)
	}
	if src["exchange"] != "plog" || src["routing_key"] != "notifications.info" || src["mapper"] != nova.ID() {
		t.Fatalf("source %v", src)
	}
	if s := h.srv.Stats(0); s.Cache.Misses != 1 || s.Mapped != 1 {
		t.Fatalf("misses %d mapped %d", s.Cache.Misses, s.Mapped)
	}
}
