// Command manila is the built-in mapper for manila's share notifications
// (share.*) and its share snapshot notifications (share_snapshot.*). Build it
// to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o manila.wasm .
//
// Every notification yields one "share" or "share_snapshot" event; see
// docs/events.md for the members and the payload paths each one is read
// from. Other manila types (share_network.*, share_server.*, share_group.*
// ...) fall outside the globs: they are not storage a project is billed for.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:       "manila",
	Version:    "1.0.0",
	EventTypes: []string{"share.*", "share_snapshot.*"},
	Releases:   []string{"liberty", "2024.1"},
}

func init() { sdk.Register(manifest, mapManila) }

func main() {}

func mapManila(m *sdk.Message, out *sdk.Output) {
	snapshot := m.Get("event_type").HasPrefix("share_snapshot.")
	resourceType, idPath, prefix := "share", "payload.share_id", "share."
	if snapshot {
		resourceType, idPath, prefix = "share_snapshot", "payload.snapshot_id", "share_snapshot."
	}
	e, et, ok := openstack.Begin(m, out, "manila", resourceType)
	if !ok {
		return
	}
	// Manila names the project project_id; tenant_id is read after it.
	project := openstack.First(m, "payload.project_id", "payload.tenant_id")
	openstack.WriteSubject(m, e, et, openstack.First(m, idPath, "payload.id"), project, m.Get("payload.user_id"), prefix)
	a := e.Object("attributes")
	if snapshot {
		a.Quantity("size_gb", openstack.First(m, "payload.size", "payload.share_size"))
		openstack.WriteStr(a, "share_id", m.Get("payload.share_id"))
		openstack.WriteStr(a, "status", m.Get("payload.status"))
	} else {
		a.Quantity("size_gb", m.Get("payload.size"))
		openstack.WriteStr(a, "share_proto", openstack.First(m, "payload.proto", "payload.share_proto"))
		openstack.WriteStr(a, "share_type_id", m.Get("payload.share_type_id"))
		openstack.WriteStr(a, "status", m.Get("payload.status"))
		openstack.WriteStr(a, "availability_zone", m.Get("payload.availability_zone"))
	}
	openstack.WritePayloadAuditPeriod(m, a, et)
	a.End()
	e.End()
}
