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
var paths = openstack.Paths(
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
)

// Indexes into paths.
const (
	pTenantID = openstack.HeaderLen + iota
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
	et := v[openstack.EventTypeAt]
	resourceType, id, prefix := "volume", v[pVolumeID], "volume."
	switch {
	case et.HasPrefix("backup."):
		resourceType, id, prefix = "backup", v[pBackupID], "backup."
	case et.HasPrefix("snapshot."):
		resourceType, id, prefix = "snapshot", v[pSnapshotID], "snapshot."
	}
	e, _, ok := openstack.Start(out, v[:], "cinder", resourceType)
	if !ok {
		return
	}
	// The resource id is the type's own id, else payload.id.
	openstack.WriteSubject(m, e, et, openstack.Pick(id, v[pID]), openstack.Pick(v[pTenantID], v[pProjectID]), v[pUserID], prefix)
	a := e.Object("attributes")
	switch resourceType {
	case "backup":
		a.Quantity("size_gb", v[pSize])
		openstack.WriteStr(a, "volume_id", v[pVolumeID])
		openstack.WriteStr(a, "status", v[pStatus])
		openstack.WriteStr(a, "availability_zone", v[pAvailabilityZone])
	case "snapshot":
		a.Quantity("size_gb", v[pVolumeSize])
		openstack.WriteStr(a, "volume_id", v[pVolumeID])
		openstack.WriteStr(a, "status", v[pStatus])
	default:
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
	}
	openstack.WriteAuditPeriod(a, et, v[pAuditBeginning], v[pAuditEnding])
	a.End()
	e.End()
}
