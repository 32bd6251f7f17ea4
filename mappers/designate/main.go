// Command designate is the built-in mapper for designate's zone
// notifications. Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o designate.wasm .
//
// Every notification it claims yields one "dns_zone" event; see
// docs/events.md for the members and the payload paths each one is read
// from.
//
// # One change, one event
//
// Designate called zones domains until its v2 API. Releases before the
// rename publish dns.domain.* only; every release since publishes each zone
// change twice, as dns.domain.<action> and as dns.zone.<action>, with the
// same payload (central's create, update and delete carry both names, and
// the producer's periodic exists task sends both). The module therefore
// claims the dns.domain.* family, which every release publishes, and of
// dns.zone.* only dns.zone.touch, the one type that has no dns.domain
// twin. The other dns.zone.* types stay unclaimed, so the collector counts
// them as skipped (reason "unclaimed") and never bills a change twice.
//
// Should a later designate stop publishing dns.domain.*, the zone changes
// would show up as unclaimed dns.zone.* in the skipped counters and in the
// summary of `tally-openstack-collector map`: the claims then have to move
// to dns.zone.*.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:       "designate",
	Version:    "1.0.0",
	EventTypes: []string{"dns.domain.*", "dns.zone.touch"},
	Releases:   []string{"kilo", "mitaka", "2024.1"},
}

func init() { sdk.Register(manifest, mapDesignate) }

func main() {}

func mapDesignate(m *sdk.Message, out *sdk.Output) {
	e, et, ok := openstack.Begin(m, out, "designate", "dns_zone")
	if !ok {
		return
	}
	prefix := "dns.domain."
	if et.HasPrefix("dns.zone.") {
		prefix = "dns.zone."
	}
	id := openstack.First(m, "payload.id", "payload.zone_id")
	openstack.WriteSubject(m, e, et, id, openstack.First(m, "payload.tenant_id", "payload.project_id"), sdk.Value{}, prefix)
	a := e.Object("attributes")
	openstack.WriteStr(a, "name", m.Get("payload.name"))
	openstack.WriteStr(a, "zone_type", m.Get("payload.type"))
	openstack.WriteStr(a, "status", m.Get("payload.status"))
	a.Quantity("ttl", m.Get("payload.ttl"))
	a.Quantity("serial", m.Get("payload.serial"))
	openstack.WritePayloadAuditPeriod(m, a, et)
	a.End()
	e.End()
}
