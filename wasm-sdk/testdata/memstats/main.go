// Command memstats is the sample guest plus a report of its own heap: after
// the mapping it appends an event of type "tally.test.memstats" carrying the
// guest runtime's cumulative allocation count, so a test can show that
// mapping allocates nothing inside the guest.
package main

import (
	"runtime"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/sample"
)

var ms runtime.MemStats

func init() {
	m := sample.Manifest
	m.Name = "memstats"
	sdk.Register(m, mapAndReport)
}

func mapAndReport(msg *sdk.Message, out *sdk.Output) {
	sample.Map(msg, out)
	runtime.ReadMemStats(&ms)
	e := out.Event()
	e.Str("event_type", "tally.test.memstats")
	e.Int("mallocs", int64(ms.Mallocs))
	e.Int("heap_alloc", int64(ms.HeapAlloc))
	e.Int("num_gc", int64(ms.NumGC))
}

func main() {}
