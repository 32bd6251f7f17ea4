//go:build !wasip1

package openstack_test

import (
	"fmt"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

func mapVolume(m *sdk.Message, out *sdk.Output) {
	e, et, ok := openstack.Begin(m, out, "cinder", "volume")
	if !ok {
		return
	}
	openstack.WriteAction(e, et, "volume.")
	openstack.WriteProject(m, e, m.Get("payload.tenant_id"))
	openstack.WriteUser(m, e, m.Get("payload.user_id"))
	openstack.WriteStr(e, "resource_id", openstack.First(m, "payload.volume_id", "payload.id"))
	e.End()
}

// The payload has no usable tenant_id and no user_id: the request context
// fills in both. The volume id comes from the second path tried.
func Example() {
	in := `{"message_id":"9d1c","event_type":"volume.create.end","timestamp":"2024-05-01 12:00:00",
	        "_context_tenant":"p-ctx","_context_user_id":"u-ctx",
	        "payload":{"tenant_id":"","id":"v-1"}}`
	out, _ := sdk.MapJSON(mapVolume, []byte(in))
	fmt.Println(string(out))
	// Output:
	// {"events":[{"event_id":"9d1c","timestamp":"2024-05-01T12:00:00Z","event_type":"volume.create.end","service":"cinder","resource_type":"volume","action":"create","project_id":"p-ctx","user_id":"u-ctx","resource_id":"v-1"}]}
}

func ExampleAction() {
	fmt.Println(openstack.Action("compute.instance.resize.confirm.end", "compute.instance."))
	fmt.Println(openstack.Action("volume.create.error", "volume."))
	fmt.Printf("%q\n", openstack.Action("image.upload", "volume."))
	// Output:
	// resize.confirm
	// create.error
	// ""
}
