// Command nova is the built-in mapper for nova's instance notifications, in
// both of the formats nova publishes: the unversioned ones
// (compute.instance.*, members directly under payload) and the versioned ones
// (instance.*, members under payload.nova_object.data, the flavor a nested
// object of its own). Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o nova.wasm .
//
// Every notification yields one "instance" event; see docs/events.md for the
// members and the payload paths each one is read from. The format is told by
// the payload, not by the event type: a versioned payload is read as one
// whatever its name. The nova_object.version of a versioned payload is not
// looked at: members are read by name, so a payload of a later version still
// gives what it has of them.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:    "nova",
	Version: "1.1.0",
	EventTypes: []string{
		"compute.instance.*",
		// Ceilometer's own notification of the samples it took at a delete:
		// not a change of the instance.
		"!compute.instance.*.samples",
		// The versioned notifications of the instance.
		"instance.*",
	},
	Releases: []string{"essex", "folsom", "grizzly", "icehouse", "newton", "ocata", "pike", "rocky", "2024.1", "2025.2"},
}

func init() { sdk.Register(manifest, mapNova) }

func main() {}

// paths are the members of an unversioned notification, looked up together
// with one host call (the fallbacks of openstack.First are asked for only
// when needed). The first after the header's tells a versioned payload.
var paths = openstack.Paths(
	`payload.nova_object\.data`,
	"payload.instance_id",
	"payload.tenant_id",
	"payload.user_id",
	"payload.instance_type",
	"payload.instance_flavor_id",
	"payload.vcpus",
	"payload.memory_mb",
	"payload.root_gb",
	"payload.ephemeral_gb",
	"payload.disk_gb",
	"payload.state",
	"payload.image_ref",
	"payload.availability_zone",
	"payload.host",
	"payload.launched_at",
	"payload.terminated_at",
	"payload.deleted_at",
	"payload.audit_period_beginning",
	"payload.audit_period_ending",
)

// versionedPaths are the same members in a versioned notification, in the
// same order (the envelope's members repeat, so both lists share the
// indexes below). Nothing of a versioned payload gives disk_gb.
var versionedPaths = openstack.Paths(
	`payload.nova_object\.data`,
	`payload.nova_object\.data.uuid`,
	`payload.nova_object\.data.tenant_id`,
	`payload.nova_object\.data.user_id`,
	`payload.nova_object\.data.flavor.nova_object\.data.name`,
	`payload.nova_object\.data.flavor.nova_object\.data.flavorid`,
	`payload.nova_object\.data.flavor.nova_object\.data.vcpus`,
	`payload.nova_object\.data.flavor.nova_object\.data.memory_mb`,
	`payload.nova_object\.data.flavor.nova_object\.data.root_gb`,
	`payload.nova_object\.data.flavor.nova_object\.data.ephemeral_gb`,
	`payload.nova_object\.data.disk_gb`, // no such member: stays missing
	`payload.nova_object\.data.state`,
	`payload.nova_object\.data.image_uuid`,
	`payload.nova_object\.data.availability_zone`,
	`payload.nova_object\.data.host`,
	`payload.nova_object\.data.launched_at`,
	`payload.nova_object\.data.terminated_at`,
	`payload.nova_object\.data.deleted_at`,
	`payload.nova_object\.data.audit_period.nova_object\.data.audit_period_beginning`,
	`payload.nova_object\.data.audit_period.nova_object\.data.audit_period_ending`,
)

// Indexes into paths and versionedPaths.
const (
	pVersioned = openstack.HeaderLen + iota
	pInstanceID
	pTenantID
	pUserID
	pFlavorName
	pFlavorID
	pVCPUs
	pMemoryMB
	pRootGB
	pEphemeralGB
	pDiskGB
	pState
	pImageRef
	pAvailabilityZone
	pHost
	pLaunchedAt
	pTerminatedAt
	pDeletedAt
	pAuditBeginning
	pAuditEnding
	nPaths
)

func mapNova(m *sdk.Message, out *sdk.Output) {
	var v [nPaths]sdk.Value
	m.GetMany(paths, v[:])
	versioned := v[pVersioned].Kind() == sdk.Object
	if versioned {
		m.GetMany(versionedPaths, v[:])
	}
	runaway(v[pHost])
	e, et, ok := openstack.Start(out, v[:], "nova", "instance")
	if !ok {
		return
	}
	id, project := v[pInstanceID], v[pTenantID]
	if !versioned {
		id = or(m, id, "payload.instance_uuid")
		if !openstack.Usable(project) {
			project = openstack.First(m, "payload.project_id", "payload.tenant")
		}
	}
	prefix := "instance."
	if et.HasPrefix("compute.instance.") {
		prefix = "compute.instance."
	}
	openstack.WriteSubject(m, e, et, id, project, v[pUserID], prefix)

	a := e.Object("attributes")
	openstack.WriteStr(a, "flavor_name", v[pFlavorName])
	openstack.WriteStr(a, "flavor_id", v[pFlavorID])
	a.Quantity("vcpus", v[pVCPUs])
	a.Quantity("memory_mb", v[pMemoryMB])
	a.Quantity("root_gb", v[pRootGB])
	a.Quantity("ephemeral_gb", v[pEphemeralGB])
	a.Quantity("disk_gb", v[pDiskGB])
	openstack.WriteStr(a, "state", v[pState])
	image := v[pImageRef]
	if !versioned {
		image = or(m, image, "payload.image_meta.base_image_ref")
	}
	openstack.WriteStr(a, "image_ref", image)
	openstack.WriteStr(a, "availability_zone", v[pAvailabilityZone])
	openstack.WriteStr(a, "host", v[pHost])
	a.Timestamp("launched_at", v[pLaunchedAt])
	a.Timestamp("terminated_at", v[pTerminatedAt])
	a.Timestamp("deleted_at", v[pDeletedAt])
	openstack.WriteAuditPeriod(a, et, v[pAuditBeginning], v[pAuditEnding])
	a.End()
	e.End()
}

// or returns v when it is usable, else the value at the fallback path (what
// openstack.First does for the pair).
func or(m *sdk.Message, v sdk.Value, fallback string) sdk.Value {
	if openstack.Usable(v) {
		return v
	}
	return openstack.First(m, fallback)
}
