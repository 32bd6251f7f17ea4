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

// paths are the members of all three resource types, looked up together
// with one host call; each type uses its own.
var paths = []string{
	"event_type",
	"message_id",
	"timestamp",
	"payload.tenant_id",
	"payload.project_id",
	"payload.user_id",
	"payload.id",
	"payload.volume_id",
	"payload.snapshot_id",
	"payload.backup_id",
	"payload.size",
	"payload.volume_size",
	"payload.volume_type",
	"payload.volume_type_id",
	"payload.status",
	"payload.availability_zone",
	"payload.audit_period_beginning",
	"payload.audit_period_ending",
}

// Indexes into paths.
const (
	pEventType = iota
	pMessageID
	pTimestamp
	pTenantID
	pProjectID
	pUserID
	pID
	pVolumeID
	pSnapshotID
	pBackupID
	pSize
	pVolumeSize
	pVolumeType
	pVolumeTypeID
	pStatus
	pAvailabilityZone
	pAuditBeginning
	pAuditEnding
	nPaths
)

func mapCinder(m *sdk.Message, out *sdk.Output) {
	var v [nPaths]sdk.Value
	m.GetMany(paths, v[:])
	et := v[pEventType]
	if et.Kind() != sdk.String || len(et.Raw()) == 0 {
		return // see openstack.EventType
	}
	e := out.Event()
	switch {
	case et.HasPrefix("backup."):
		header(m, e, &v, "backup", v[pBackupID], "backup.")
		a := e.Object("attributes")
		a.Quantity("size_gb", v[pSize])
		openstack.WriteStr(a, "volume_id", v[pVolumeID])
		openstack.WriteStr(a, "status", v[pStatus])
		openstack.WriteStr(a, "availability_zone", v[pAvailabilityZone])
		auditPeriod(a, &v)
		a.End()
	case et.HasPrefix("snapshot."):
		header(m, e, &v, "snapshot", v[pSnapshotID], "snapshot.")
		a := e.Object("attributes")
		a.Quantity("size_gb", v[pVolumeSize])
		openstack.WriteStr(a, "volume_id", v[pVolumeID])
		openstack.WriteStr(a, "status", v[pStatus])
		auditPeriod(a, &v)
		a.End()
	default:
		header(m, e, &v, "volume", v[pVolumeID], "volume.")
		a := e.Object("attributes")
		a.Quantity("size_gb", v[pSize])
		openstack.WriteStr(a, "volume_type", openstack.Pick(v[pVolumeType], v[pVolumeTypeID]))
		openstack.WriteStr(a, "status", v[pStatus])
		openstack.WriteStr(a, "availability_zone", v[pAvailabilityZone])
		if et.HasPrefix("volume.attach.") || et.HasPrefix("volume.detach.") {
			// Newer releases list the attachments in volume_attachment (the
			// server as server_id, earlier as instance_uuid); older ones name
			// the server in payload.instance_uuid. Of several attachments the
			// first is taken.
			openstack.WriteStr(a, "instance_id", openstack.First(m,
				"payload.volume_attachment.0.server_id",
				"payload.volume_attachment.0.instance_uuid",
				"payload.instance_uuid"))
		}
		auditPeriod(a, &v)
		a.End()
	}
	e.End()
}

// header writes the members every event begins with, the resource id (id,
// else payload.id), the project, the user and the action.
func header(m *sdk.Message, e *sdk.Event, v *[nPaths]sdk.Value, resourceType string, id sdk.Value, prefix string) {
	et := v[pEventType]
	openstack.WriteHeaderValues(e, v[pMessageID], v[pTimestamp], et, "cinder", resourceType, -1)
	openstack.WriteStr(e, "resource_id", openstack.Pick(id, v[pID]))
	openstack.WriteProject(m, e, openstack.Pick(v[pTenantID], v[pProjectID]))
	openstack.WriteUser(m, e, v[pUserID])
	openstack.WriteAction(e, et, prefix)
}

// auditPeriod writes the audit period of an exists event.
func auditPeriod(a *sdk.Event, v *[nPaths]sdk.Value) {
	if openstack.IsExists(v[pEventType]) {
		openstack.WriteAuditPeriod(a, v[pAuditBeginning], v[pAuditEnding])
	}
}
