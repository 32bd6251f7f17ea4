// Command clockrand reads what a guest can of the outside world: the clocks,
// crypto/rand, and a sleep as long as the input's "sleep_ms". The runtime's
// sandbox tests use it: the same input must map the same, and a sleep must
// end at the call's deadline.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

func init() {
	sdk.Register(sdk.Manifest{
		Name:       "clockrand",
		Version:    "1.0.0",
		EventTypes: []string{"*"},
	}, func(m *sdk.Message, o *sdk.Output) {
		start := time.Now()
		if ms, ok := m.Get("sleep_ms").Int(); ok && ms > 0 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
		var b [16]byte
		_, _ = rand.Read(b[:])
		ev := o.Event()
		ev.Str("event_type", "clockrand.read")
		ev.Str("event_id", hex.EncodeToString(b[:]))
		// The members the event contract requires, fixed.
		ev.Str("timestamp", "2024-05-01T12:00:00Z")
		ev.Str("service", "test")
		ev.Str("resource_type", "clock")
		ev.Str("resource_id", "r1")
		ev.Str("project_id", "p1")
		ev.Str("action", "read")
		a := ev.Object("attributes")
		a.Str("now", start.UTC().Format(time.RFC3339Nano))
		a.Str("slept", strconv.FormatInt(int64(time.Since(start)), 10))
		a.End()
		ev.End()
	})
}

func main() {}
