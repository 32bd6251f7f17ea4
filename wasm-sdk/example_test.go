//go:build !wasip1

package sdk_test

import (
	"fmt"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

func mapVolume(msg *sdk.Message, out *sdk.Output) {
	e := out.Event()
	e.StrValue("event_id", msg.Get("message_id"))
	e.Timestamp("timestamp", msg.Get("timestamp"))
	e.StrValue("event_type", msg.Get("event_type"))
	e.Str("service", "cinder")
	e.Str("resource_type", "volume")
	e.StrValue("resource_id", msg.Get("payload.volume_id"))
	e.StrValue("project_id", msg.Get("payload.tenant_id").Or(msg.Get("_context_project_id")))
	e.Str("action", "create")
	a := e.Object("attributes")
	a.Quantity("size_gb", msg.Get("payload.size"))
	a.StrValue("volume_type", msg.Get("payload.volume_type"))
	a.StrValue("status", msg.Get("payload.status"))
	a.End()
	e.End()
}

func ExampleMapJSON() {
	in := `{"message_id":"9d1c","event_type":"volume.create.end","timestamp":"2024-05-01 12:00:00.123456",
	        "_context_project_id":"p-ctx",
	        "payload":{"volume_id":"v-1","tenant_id":"","size":"10","volume_type":"fast \"ssd\"","status":"available"}}`
	out, err := sdk.MapJSON(mapVolume, []byte(in))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output:
	// {"events":[{"event_id":"9d1c","timestamp":"2024-05-01T12:00:00.123456Z","event_type":"volume.create.end","service":"cinder","resource_type":"volume","resource_id":"v-1","project_id":"p-ctx","action":"create","attributes":{"size_gb":10,"volume_type":"fast \"ssd\"","status":"available"}}]}
}

func ExampleOutput_Error() {
	out, _ := sdk.MapJSON(func(msg *sdk.Message, out *sdk.Output) {
		if !msg.Get("payload").Exists() {
			out.Error("no payload")
			return
		}
		out.Event().Str("event_type", "x")
	}, []byte(`{"event_type":"volume.create.end"}`))
	fmt.Println(string(out))
	// Output: {"error":"no payload"}
}
