// Command glance is the built-in mapper for glance's image notifications
// (image.*, without the image.member.* sharing notifications). Build it to
// WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o glance.wasm .
//
// Every notification yields one "image" event; see docs/events.md for the
// members and the payload paths each one is read from. An image.send (a
// download) is billed to the receiving project and carries bytes_sent.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:    "glance",
	Version: "1.1.0",
	EventTypes: []string{
		"image.*",
		// Shares of an image with another project: not a change of the image.
		"!image.member.*",
	},
	Releases: []string{"folsom", "grizzly", "havana", "2024.1"},
}

func init() { sdk.Register(manifest, mapGlance) }

func main() {}

func mapGlance(m *sdk.Message, out *sdk.Output) {
	e, et, ok := openstack.Begin(m, out, "glance", "image")
	if !ok {
		return
	}
	id := openstack.First(m, "payload.id", "payload.image_id")
	if et.Equal("image.send") {
		openstack.WriteSubject(m, e, et, id, m.Get("payload.receiver_tenant_id"), m.Get("payload.receiver_user_id"), "image.")
		a := e.Object("attributes")
		a.Quantity("bytes_sent", m.Get("payload.bytes_sent"))
		a.End()
		e.End()
		return
	}
	project := openstack.First(m, "payload.owner", "payload.tenant_id", "payload.project_id", "payload.tenant")
	openstack.WriteSubject(m, e, et, id, project, m.Get("payload.user_id"), "image.")
	a := e.Object("attributes")
	a.Quantity("size_bytes", m.Get("payload.size"))
	openstack.WriteStr(a, "disk_format", m.Get("payload.disk_format"))
	openstack.WriteStr(a, "container_format", m.Get("payload.container_format"))
	openstack.WriteStr(a, "status", m.Get("payload.status"))
	// Images API v2 says "visibility"; v1 had the boolean is_public.
	if !openstack.WriteStr(a, "visibility", m.Get("payload.visibility")) {
		switch m.Get("payload.is_public").Kind() {
		case sdk.True:
			a.Str("visibility", "public")
		case sdk.False:
			a.Str("visibility", "private")
		}
	}
	openstack.WritePayloadAuditPeriod(m, a, et)
	a.End()
	e.End()
}
