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
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
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

// paths are the members mapNova reads, looked up together with one host call
// (the fallbacks of openstack.First are asked for only when needed).
var paths = []string{
	`payload.nova_object\.data`,
	"event_type",
	"message_id",
	"timestamp",
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
}

// Indexes into paths.
const (
	pVersioned = iota
	pEventType
	pMessageID
	pTimestamp
	pInstanceID
	pTenantID
	pUserID
	pInstanceType
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
	nPaths
)

func mapNova(m *sdk.Message, out *sdk.Output) {
	var v [nPaths]sdk.Value
	m.GetMany(paths, v[:])
	if v[pVersioned].Exists() {
		sdk.Log(sdk.LevelDebug, "versioned nova payload under an unversioned event type: no event")
		return
	}
	et := v[pEventType]
	if et.Kind() != sdk.String || len(et.Raw()) == 0 {
		return // see openstack.EventType
	}
	e := out.Event()
	openstack.WriteHeaderValues(e, v[pMessageID], v[pTimestamp], et, "nova", "instance", -1)
	openstack.WriteStr(e, "resource_id", or(m, v[pInstanceID], "payload.instance_uuid"))
	project := v[pTenantID]
	if !openstack.Usable(project) {
		project = openstack.First(m, "payload.project_id", "payload.tenant")
	}
	openstack.WriteProject(m, e, project)
	openstack.WriteUser(m, e, v[pUserID])
	openstack.WriteAction(e, et, prefix)

	a := e.Object("attributes")
	openstack.WriteStr(a, "flavor_name", v[pInstanceType])
	openstack.WriteStr(a, "flavor_id", v[pFlavorID])
	a.NumValue("vcpus", v[pVCPUs])
	a.NumValue("memory_mb", v[pMemoryMB])
	a.NumValue("root_gb", v[pRootGB])
	a.NumValue("ephemeral_gb", v[pEphemeralGB])
	a.NumValue("disk_gb", v[pDiskGB])
	openstack.WriteStr(a, "state", v[pState])
	openstack.WriteStr(a, "image_ref", or(m, v[pImageRef], "payload.image_meta.base_image_ref"))
	openstack.WriteStr(a, "availability_zone", v[pAvailabilityZone])
	openstack.WriteStr(a, "host", v[pHost])
	a.Timestamp("launched_at", v[pLaunchedAt])
	a.Timestamp("terminated_at", v[pTerminatedAt])
	a.Timestamp("deleted_at", v[pDeletedAt])
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
