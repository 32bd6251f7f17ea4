// Command octavia is the built-in mapper for octavia's load balancer
// notifications (octavia.loadbalancer.*: create, update and delete; octavia
// sends none for listeners, pools or members). Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o octavia.wasm .
//
// Every notification yields one "loadbalancer" event; see docs/events.md
// for the members and the payload paths each one is read from.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:       "octavia",
	Version:    "1.0.0",
	EventTypes: []string{"octavia.loadbalancer.*"},
	Releases:   []string{"yoga", "2024.1"},
}

func init() { sdk.Register(manifest, mapOctavia) }

func main() {}

func mapOctavia(m *sdk.Message, out *sdk.Output) {
	e, et, ok := openstack.Begin(m, out, "octavia", "loadbalancer")
	if !ok {
		return
	}
	id := openstack.First(m, "payload.id", "payload.loadbalancer_id")
	openstack.WriteSubject(m, e, et, id, openstack.First(m, "payload.project_id", "payload.tenant_id"), sdk.Value{}, "octavia.loadbalancer.")
	a := e.Object("attributes")
	openstack.WriteStr(a, "provider", m.Get("payload.provider"))
	openstack.WriteStr(a, "flavor_id", m.Get("payload.flavor_id"))
	openstack.WriteStr(a, "vip_address", openstack.First(m, "payload.vip.ip_address", "payload.vip_address"))
	openstack.WriteStr(a, "availability_zone", m.Get("payload.availability_zone"))
	openstack.WriteStr(a, "provisioning_status", m.Get("payload.provisioning_status"))
	a.End()
	e.End()
}
