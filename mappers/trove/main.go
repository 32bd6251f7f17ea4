// Command trove is the built-in mapper for trove's database instance
// notifications (trove.instance.*: create, modify_volume, modify_flavor,
// delete and the periodic exists). Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o trove.wasm .
//
// Every notification yields one "database_instance" event; see
// docs/events.md for the members and the payload paths each one is read
// from. Trove's API notifications (dbaas.*) describe requests, not the
// instance, and are not claimed.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:       "trove",
	Version:    "1.0.0",
	EventTypes: []string{"trove.instance.*"},
	Releases:   []string{"kilo", "2024.1"},
}

func init() { sdk.Register(manifest, mapTrove) }

func main() {}

func mapTrove(m *sdk.Message, out *sdk.Output) {
	e, et, ok := openstack.Begin(m, out, "trove", "database_instance")
	if !ok {
		return
	}
	project := openstack.First(m, "payload.tenant_id", "payload.project_id")
	openstack.WriteSubject(m, e, et, m.Get("payload.instance_id"), project, m.Get("payload.user_id"), "trove.instance.")

	a := e.Object("attributes")
	openstack.WriteStr(a, "flavor_id", m.Get("payload.instance_type_id"))
	openstack.WriteStr(a, "flavor_name", m.Get("payload.instance_type"))
	a.Quantity("volume_size_gb", m.Get("payload.volume_size"))
	openstack.WriteStr(a, "datastore_type", openstack.First(m, "payload.datastore_type", "payload.datastore"))
	openstack.WriteStr(a, "datastore_version", m.Get("payload.datastore_version"))
	openstack.WriteStr(a, "state", m.Get("payload.state"))
	openstack.WriteStr(a, "availability_zone", m.Get("payload.availability_zone"))
	a.Timestamp("launched_at", m.Get("payload.launched_at"))
	openstack.WritePayloadAuditPeriod(m, a, et)
	a.End()
	e.End()
}
