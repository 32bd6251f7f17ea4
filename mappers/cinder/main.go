// Command cinder is the built-in mapper for cinder's volume, snapshot and
// backup notifications (volume.*, snapshot.*, backup.*). Build it to
// WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o cinder.wasm .
//
// Every notification yields one "volume", "snapshot" or "backup" event; see
// docs/events.md for the members and the payload paths each one is read
// from. Nothing below volume_attachment but the server id is read: the
// attachment carries connection_info with the storage credentials.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:    "cinder",
	Version: "1.1.0",
	EventTypes: []string{
		"volume.*", "snapshot.*", "backup.*",
		// nova's per-volume I/O counters of an attached volume, published
		// on nova's exchange: not a change of the volume.
		"!volume.usage",
	},
	Releases: []string{"folsom", "icehouse", "juno", "liberty", "pike", "2024.1"},
}

func init() { sdk.Register(manifest, mapCinder) }

func main() {}

func mapCinder(m *sdk.Message, out *sdk.Output) {
	et, ok := openstack.EventType(m)
	if !ok {
		return
	}
	e := out.Event()
	if et.HasPrefix("backup.") {
		openstack.WriteHeader(m, e, et, "cinder", "backup", -1)
		openstack.WriteStr(e, "resource_id", openstack.First(m, "payload.backup_id", "payload.id"))
		common(m, e, et, "backup.")
		a := e.Object("attributes")
		a.NumValue("size_gb", m.Get("payload.size"))
		openstack.WriteStr(a, "volume_id", m.Get("payload.volume_id"))
		openstack.WriteStr(a, "status", m.Get("payload.status"))
		openstack.WriteStr(a, "availability_zone", m.Get("payload.availability_zone"))
		auditPeriod(m, a, et)
		a.End()
		e.End()
		return
	}
	if et.HasPrefix("snapshot.") {
		openstack.WriteHeader(m, e, et, "cinder", "snapshot", -1)
		openstack.WriteStr(e, "resource_id", openstack.First(m, "payload.snapshot_id", "payload.id"))
		common(m, e, et, "snapshot.")
		a := e.Object("attributes")
		a.NumValue("size_gb", m.Get("payload.volume_size"))
		openstack.WriteStr(a, "volume_id", m.Get("payload.volume_id"))
		openstack.WriteStr(a, "status", m.Get("payload.status"))
		auditPeriod(m, a, et)
		a.End()
		e.End()
		return
	}
	openstack.WriteHeader(m, e, et, "cinder", "volume", -1)
	openstack.WriteStr(e, "resource_id", openstack.First(m, "payload.volume_id", "payload.id"))
	common(m, e, et, "volume.")
	a := e.Object("attributes")
	a.NumValue("size_gb", m.Get("payload.size"))
	openstack.WriteStr(a, "volume_type", openstack.First(m, "payload.volume_type", "payload.volume_type_id"))
	openstack.WriteStr(a, "status", m.Get("payload.status"))
	openstack.WriteStr(a, "availability_zone", m.Get("payload.availability_zone"))
	if et.HasPrefix("volume.attach.") || et.HasPrefix("volume.detach.") {
		// Newer releases list the attachments in volume_attachment (the
		// server as server_id, earlier as instance_uuid); older ones name the
		// server in payload.instance_uuid. Of several attachments the first
		// is taken.
		openstack.WriteStr(a, "instance_id", openstack.First(m,
			"payload.volume_attachment.0.server_id",
			"payload.volume_attachment.0.instance_uuid",
			"payload.instance_uuid"))
	}
	auditPeriod(m, a, et)
	a.End()
	e.End()
}

// auditPeriod writes the audit period of an exists event.
func auditPeriod(m *sdk.Message, a *sdk.Event, et sdk.Value) {
	if openstack.IsExists(et) {
		openstack.WriteAuditPeriod(a, m.Get("payload.audit_period_beginning"), m.Get("payload.audit_period_ending"))
	}
}

// common writes the project, user and action of either resource type.
func common(m *sdk.Message, e *sdk.Event, et sdk.Value, prefix string) {
	openstack.WriteProject(m, e, openstack.First(m, "payload.tenant_id", "payload.project_id"))
	openstack.WriteUser(m, e, m.Get("payload.user_id"))
	openstack.WriteAction(e, et, prefix)
}
