// Command ironic is the built-in mapper for ironic's versioned node
// notifications (baremetal.node.*, members under
// payload.ironic_object.data). Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o ironic.wasm .
//
// Every notification yields one "baremetal_node" event; see docs/events.md
// for the members and the payload paths each one is read from. As with
// nova's versioned format, the ironic_object.version is not looked at:
// members are read by name. Chassis, ports, port groups, volume connectors
// and targets, deploy templates and allocations are not claimed.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:       "ironic",
	Version:    "1.0.0",
	EventTypes: []string{"baremetal.node.*"},
	Releases:   []string{"pike", "2024.1"},
}

func init() { sdk.Register(manifest, mapIronic) }

func main() {}

var paths = openstack.Paths(
	`payload.ironic_object\.data.uuid`,
	`payload.ironic_object\.data.lessee`,
	`payload.ironic_object\.data.owner`,
	`payload.ironic_object\.data.resource_class`,
	`payload.ironic_object\.data.provision_state`,
	`payload.ironic_object\.data.power_state`,
	`payload.ironic_object\.data.instance_uuid`,
	`payload.ironic_object\.data.driver`,
)

const (
	pUUID = openstack.HeaderLen + iota
	pLessee
	pOwner
	pResourceClass
	pProvisionState
	pPowerState
	pInstanceUUID
	pDriver
	nPaths
)

func mapIronic(m *sdk.Message, out *sdk.Output) {
	var v [nPaths]sdk.Value
	m.GetMany(paths, v[:])
	e, et, ok := openstack.Start(out, v[:], "ironic", "baremetal_node")
	if !ok {
		return
	}
	// The lessee is the project the node is leased to, the one that uses
	// it; the owner the project that owns it.
	openstack.WriteSubject(m, e, et, v[pUUID], openstack.Pick(v[pLessee], v[pOwner]), sdk.Value{}, "baremetal.node.")

	a := e.Object("attributes")
	openstack.WriteStr(a, "resource_class", v[pResourceClass])
	openstack.WriteStr(a, "provision_state", v[pProvisionState])
	openstack.WriteStr(a, "power_state", v[pPowerState])
	openstack.WriteStr(a, "instance_uuid", v[pInstanceUUID])
	openstack.WriteStr(a, "driver", v[pDriver])
	a.End()
	e.End()
}
