// Command neutron is the built-in mapper for neutron's core resources
// (network.*, subnet.*, port.*, router.*, floatingip.*) and for the firewall
// (FWaaS v1 firewall.*, v2 firewall_group.*) and VPN (vpnservice.*,
// ipsec_site_connection.*) services. Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o neutron.wasm .
//
// A notification about one resource ("network": {...}) yields one event; a
// bulk one ("networks": [...]) yields an event per element, each with the
// event_id "<message_id>:<index>". A delete carries only the id
// ("network_id"), and an update.start the id beside the changed members.
// See docs/events.md for the members and their payload paths. The firewall
// policies and rules, the IPsec and IKE policies, VPN endpoint groups and
// the LBaaS v1 types are not claimed: they are configuration of a billed
// resource, not one. Nothing of an ipsec_site_connection but the members
// named below is read: it carries the pre-shared key (psk).
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:    "neutron",
	Version: "1.1.0",
	EventTypes: []string{
		"network.*", "subnet.*", "port.*", "router.*", "floatingip.*",
		"firewall.*", "firewall_group.*", "vpnservice.*", "ipsec_site_connection.*",
	},
	Releases: []string{"folsom", "icehouse", "juno", "2024.1"},
}

func init() { sdk.Register(manifest, mapNeutron) }

func main() {}

// resource names the payload members of one resource type.
type resource struct {
	name   string // resource_type
	prefix string // "network.", the event type's first segment
	one    string // "payload.network"
	bulk   string // "payload.networks"
	id     string // "payload.network_id", what a delete carries
}

var resources = [...]resource{
	{"network", "network.", "payload.network", "payload.networks", "payload.network_id"},
	{"subnet", "subnet.", "payload.subnet", "payload.subnets", "payload.subnet_id"},
	{"port", "port.", "payload.port", "payload.ports", "payload.port_id"},
	{"router", "router.", "payload.router", "payload.routers", "payload.router_id"},
	{"floatingip", "floatingip.", "payload.floatingip", "payload.floatingips", "payload.floatingip_id"},
	// FWaaS v1 and v2: one resource type for the firewall and the firewall
	// group that replaced it.
	{"firewall", "firewall.", "payload.firewall", "payload.firewalls", "payload.firewall_id"},
	{"firewall", "firewall_group.", "payload.firewall_group", "payload.firewall_groups", "payload.firewall_group_id"},
	{"vpnservice", "vpnservice.", "payload.vpnservice", "payload.vpnservices", "payload.vpnservice_id"},
	{"ipsec_site_connection", "ipsec_site_connection.", "payload.ipsec_site_connection", "payload.ipsec_site_connections", "payload.ipsec_site_connection_id"},
}

// maxBulk bounds the events taken from one bulk notification.
const maxBulk = 1000

func mapNeutron(m *sdk.Message, out *sdk.Output) {
	et, ok := openstack.EventType(m)
	if !ok {
		return
	}
	r := &resources[0]
	for i := range resources {
		if et.HasPrefix(resources[i].prefix) {
			r = &resources[i]
			break
		}
	}
	var p openstack.PathBuf
	if m.Get(r.one).Kind() != sdk.Object && m.Get(r.bulk).Kind() == sdk.Array {
		for i := 0; i < maxBulk; i++ {
			p.SetBase(r.bulk, i)
			if m.Get(p.Base()).Kind() == sdk.Missing {
				return
			}
			event(m, out, et, r, &p, i)
		}
		return
	}
	p.SetBase(r.one, -1)
	event(m, out, et, r, &p, -1)
}

// event writes one event for the resource whose members are below p's base.
func event(m *sdk.Message, out *sdk.Output, et sdk.Value, r *resource, p *openstack.PathBuf, index int) {
	e := out.Event()
	openstack.WriteHeader(m, e, et, "neutron", r.name, index)
	id := m.Get(p.At("id"))
	if !openstack.Usable(id) && index < 0 {
		id = openstack.First(m, r.id, "payload.id")
	}
	// p.at reuses one buffer: one lookup at a time.
	project := m.Get(p.At("project_id"))
	if !openstack.Usable(project) {
		project = m.Get(p.At("tenant_id"))
	}
	openstack.WriteSubject(m, e, et, id, project, sdk.Value{}, r.prefix)

	a := e.Object("attributes")
	if r.name == "floatingip" {
		openstack.WriteStr(a, "floating_ip_address", m.Get(p.At("floating_ip_address")))
		openstack.WriteStr(a, "floating_network_id", m.Get(p.At("floating_network_id")))
		openstack.WriteStr(a, "port_id", m.Get(p.At("port_id")))
		openstack.WriteStr(a, "status", m.Get(p.At("status")))
	} else {
		openstack.WriteStr(a, "name", m.Get(p.At("name")))
		openstack.WriteStr(a, "status", m.Get(p.At("status")))
		switch r.name {
		case "port":
			openstack.WriteStr(a, "network_id", m.Get(p.At("network_id")))
			openstack.WriteStr(a, "device_owner", m.Get(p.At("device_owner")))
		case "vpnservice":
			openstack.WriteStr(a, "router_id", m.Get(p.At("router_id")))
			openstack.WriteStr(a, "subnet_id", m.Get(p.At("subnet_id")))
		case "ipsec_site_connection":
			openstack.WriteStr(a, "vpnservice_id", m.Get(p.At("vpnservice_id")))
			openstack.WriteStr(a, "peer_address", m.Get(p.At("peer_address")))
		}
	}
	openstack.WritePayloadAuditPeriod(m, a, et)
	a.End()
	e.End()
}
