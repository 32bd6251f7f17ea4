// Command cinder is the built-in mapper for cinder's volume and snapshot
// notifications (volume.*, snapshot.*). Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o cinder.wasm .
//
// Every notification yields one "volume" or "snapshot" event; see
// docs/events.md for the members and the payload paths each one is read
// from. Nothing below volume_attachment but the server id is read: the
// attachment carries connection_info with the storage credentials.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

var manifest = sdk.Manifest{
	Name:       "cinder",
	Version:    "1.0.0",
	EventTypes: []string{"volume.*", "snapshot.*"},
	Releases:   []string{"folsom", "icehouse", "juno", "liberty", "pike", "2024.1"},
}

func init() { sdk.Register(manifest, mapCinder) }

func main() {}

func mapCinder(m *sdk.Message, out *sdk.Output) {
	et, ok := eventType(m)
	if !ok {
		return
	}
	e := out.Event()
	if et.HasPrefix("snapshot.") {
		header(m, e, et, "cinder", "snapshot", -1)
		str(e, "resource_id", first(m, "payload.snapshot_id", "payload.id"))
		common(m, e, et, "snapshot.")
		a := e.Object("attributes")
		a.NumValue("size_gb", m.Get("payload.volume_size"))
		str(a, "volume_id", m.Get("payload.volume_id"))
		str(a, "status", m.Get("payload.status"))
		a.End()
		e.End()
		return
	}
	header(m, e, et, "cinder", "volume", -1)
	str(e, "resource_id", first(m, "payload.volume_id", "payload.id"))
	common(m, e, et, "volume.")
	a := e.Object("attributes")
	a.NumValue("size_gb", m.Get("payload.size"))
	str(a, "volume_type", first(m, "payload.volume_type", "payload.volume_type_id"))
	str(a, "status", m.Get("payload.status"))
	str(a, "availability_zone", m.Get("payload.availability_zone"))
	if et.HasPrefix("volume.attach.") || et.HasPrefix("volume.detach.") {
		// Newer releases list the attachments in volume_attachment (the
		// server as server_id, earlier as instance_uuid); older ones name the
		// server in payload.instance_uuid. Of several attachments the first
		// is taken.
		str(a, "instance_id", first(m,
			"payload.volume_attachment.0.server_id",
			"payload.volume_attachment.0.instance_uuid",
			"payload.instance_uuid"))
	}
	a.End()
	e.End()
}

// common writes the project, user and action of either resource type.
func common(m *sdk.Message, e *sdk.Event, et sdk.Value, prefix string) {
	writeProject(m, e, first(m, "payload.tenant_id", "payload.project_id"))
	writeUser(m, e, m.Get("payload.user_id"))
	writeAction(e, et, prefix)
}
