//go:build !wasip1 && !race

// The race detector's instrumentation allocates where the code does not, so
// the allocation counts are checked without -race only (make test-go runs
// every *_norace_test.go).

package openstack_test

import (
	"testing"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

// The helpers write into the builder without allocating; MapJSON's own
// allocation (the returned document) is the only one.
func TestNoAllocations(t *testing.T) {
	in := []byte(`{"message_id":"9d1c","event_type":"volume.create.end","timestamp":"2024-05-01 12:00:00",
	               "_context_tenant":"p-ctx","_context_user_id":"u-ctx","payload":{"id":"v-1"}}`)
	m := func(msg *sdk.Message, out *sdk.Output) {
		et, _ := openstack.EventType(msg)
		e := out.Event()
		openstack.WriteHeader(msg, e, et, "cinder", "volume", 7)
		openstack.WriteAction(e, et, "volume.")
		openstack.WriteProject(msg, e, msg.Get("payload.tenant_id"))
		openstack.WriteUser(msg, e, msg.Get("payload.user_id"))
		openstack.WriteStr(e, "resource_id", openstack.First(msg, "payload.volume_id", "payload.id"))
	}
	paths := openstack.Paths("payload.id", "payload.tenant_id", "payload.user_id")
	const pID = openstack.HeaderLen
	many := func(msg *sdk.Message, out *sdk.Output) {
		var v [openstack.HeaderLen + 3]sdk.Value
		msg.GetMany(paths, v[:])
		if e, et, ok := openstack.Start(out, v[:], "cinder", "volume"); ok {
			openstack.WriteSubject(msg, e, et, v[pID], v[pID+1], v[pID+2], "volume.")
		}
	}
	begin := func(msg *sdk.Message, out *sdk.Output) {
		if e, et, ok := openstack.Begin(msg, out, "cinder", "volume"); ok {
			openstack.WriteSubject(msg, e, et, msg.Get("payload.id"), msg.Get("payload.tenant_id"), msg.Get("payload.user_id"), "volume.")
		}
	}
	base := testing.AllocsPerRun(100, func() { _, _ = sdk.MapJSON(func(*sdk.Message, *sdk.Output) {}, in) })
	for name, m := range map[string]func(*sdk.Message, *sdk.Output){"one by one": m, "Start and WriteSubject": many, "Begin and WriteSubject": begin} {
		if n := testing.AllocsPerRun(100, func() { _, _ = sdk.MapJSON(m, in) }); n > base {
			t.Errorf("%s: %v allocations per call, %v without the helpers", name, n, base)
		}
	}
}
