// Command nova is the built-in mapper for nova's unversioned instance
// notifications (compute.instance.*). Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o nova.wasm .
//
// Every notification yields one "instance" event; see docs/events.md for the
// members and the payload paths each one is read from. Versioned
// notifications (payload.nova_object.data) use other event types
// (instance.*), which this module does not claim; one that arrives under a
// compute.instance.* name anyway yields no event.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

var manifest = sdk.Manifest{
	Name:    "nova",
	Version: "1.0.0",
	EventTypes: []string{
		"compute.instance.*",
		// Ceilometer's own notification of the samples it took at a delete:
		// not a change of the instance.
		"!compute.instance.*.samples",
	},
	Releases: []string{"essex", "folsom", "grizzly", "icehouse", "newton", "pike", "2024.1"},
}

func init() { sdk.Register(manifest, mapNova) }

func main() {}

const prefix = "compute.instance."

func mapNova(m *sdk.Message, out *sdk.Output) {
	if m.Get(`payload.nova_object\.data`).Exists() {
		sdk.Log(sdk.LevelDebug, "versioned nova payload under an unversioned event type: no event")
		return
	}
	et, ok := eventType(m)
	if !ok {
		return
	}
	e := out.Event()
	header(m, e, et, "nova", "instance", -1)
	str(e, "resource_id", first(m, "payload.instance_id", "payload.instance_uuid"))
	writeProject(m, e, first(m, "payload.tenant_id", "payload.project_id", "payload.tenant"))
	writeUser(m, e, m.Get("payload.user_id"))
	writeAction(e, et, prefix)

	a := e.Object("attributes")
	str(a, "flavor_name", m.Get("payload.instance_type"))
	str(a, "flavor_id", m.Get("payload.instance_flavor_id"))
	a.NumValue("vcpus", m.Get("payload.vcpus"))
	a.NumValue("memory_mb", m.Get("payload.memory_mb"))
	a.NumValue("root_gb", m.Get("payload.root_gb"))
	a.NumValue("ephemeral_gb", m.Get("payload.ephemeral_gb"))
	a.NumValue("disk_gb", m.Get("payload.disk_gb"))
	str(a, "state", m.Get("payload.state"))
	str(a, "image_ref", first(m, "payload.image_ref", "payload.image_meta.base_image_ref"))
	str(a, "availability_zone", m.Get("payload.availability_zone"))
	str(a, "host", m.Get("payload.host"))
	a.Timestamp("launched_at", m.Get("payload.launched_at"))
	a.Timestamp("terminated_at", m.Get("payload.terminated_at"))
	a.Timestamp("deleted_at", m.Get("payload.deleted_at"))
	a.End()
	e.End()
}
