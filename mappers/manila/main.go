// Command manila is the built-in mapper for manila's share notifications
// (share.*) and its share snapshot notifications (share_snapshot.*). Build it
// to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o manila.wasm .
//
// Every notification yields one "share" or "share_snapshot" event; see
// docs/events.md for the members and the payload paths each one is read
// from. Other manila types (share_network.*, share_server.*, share_group.*
// ...) fall outside the globs: they are not storage a project is billed for.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:       "manila",
	Version:    "1.0.0",
	EventTypes: []string{"share.*", "share_snapshot.*"},
	Releases:   []string{"liberty", "2024.1"},
}

func init() { sdk.Register(manifest, mapManila) }

func main() {}

func mapManila(m *sdk.Message, out *sdk.Output) {
	et, ok := openstack.EventType(m)
	if !ok {
		return
	}
	e := out.Event()
	if et.HasPrefix("share_snapshot.") {
		openstack.WriteHeader(m, e, et, "manila", "share_snapshot", -1)
		subject(m, e, et, openstack.First(m, "payload.snapshot_id", "payload.id"), "share_snapshot.")
		a := e.Object("attributes")
		a.Quantity("size_gb", openstack.First(m, "payload.size", "payload.share_size"))
		openstack.WriteStr(a, "share_id", m.Get("payload.share_id"))
		openstack.WriteStr(a, "status", m.Get("payload.status"))
		auditPeriod(m, a, et)
		a.End()
		e.End()
		return
	}
	openstack.WriteHeader(m, e, et, "manila", "share", -1)
	subject(m, e, et, openstack.First(m, "payload.share_id", "payload.id"), "share.")
	a := e.Object("attributes")
	a.Quantity("size_gb", m.Get("payload.size"))
	openstack.WriteStr(a, "share_proto", openstack.First(m, "payload.proto", "payload.share_proto"))
	openstack.WriteStr(a, "share_type_id", m.Get("payload.share_type_id"))
	openstack.WriteStr(a, "status", m.Get("payload.status"))
	openstack.WriteStr(a, "availability_zone", m.Get("payload.availability_zone"))
	auditPeriod(m, a, et)
	a.End()
	e.End()
}

// subject writes the resource id id and the project, user and action of
// either resource type. Manila names the project project_id; tenant_id is
// read after it.
func subject(m *sdk.Message, e *sdk.Event, et, id sdk.Value, prefix string) {
	project := openstack.First(m, "payload.project_id", "payload.tenant_id")
	openstack.WriteSubject(m, e, et, id, project, m.Get("payload.user_id"), prefix)
}

// auditPeriod writes the audit period of an exists event.
func auditPeriod(m *sdk.Message, a *sdk.Event, et sdk.Value) {
	if openstack.IsExists(et) {
		openstack.WriteAuditPeriod(a, m.Get("payload.audit_period_beginning"), m.Get("payload.audit_period_ending"))
	}
}
