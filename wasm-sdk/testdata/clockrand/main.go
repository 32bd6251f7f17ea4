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
		ev.Str("now", start.UTC().Format(time.RFC3339Nano))
		ev.Str("slept", strconv.FormatInt(int64(time.Since(start)), 10))
		ev.End()
	})
}

func main() {}
