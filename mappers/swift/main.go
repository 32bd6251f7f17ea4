// Command swift is the built-in mapper for the object storage requests that
// ceilometermiddleware, in swift's proxy pipeline, reports as CADF events
// (objectstore.http.request). Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o swift.wasm .
//
// Every request yields one "object_storage" event: the account (the project
// that owns the storage) as resource_id, the project of whoever made the
// request as project_id, the HTTP verb, container and object, and the bytes
// that went in and out. See docs/events.md for the payload paths.
package main

import (
	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/openstack"
)

var manifest = sdk.Manifest{
	Name:       "swift",
	Version:    "1.0.0",
	EventTypes: []string{"objectstore.http.request"},
	Releases:   []string{"kilo", "pike", "2024.1"},
}

func init() { sdk.Register(manifest, mapSwift) }

func main() {}

// The CADF measurements ceilometermiddleware adds, each only when its count
// is not zero.
const (
	metricIncoming = "storage.objects.incoming.bytes"
	metricOutgoing = "storage.objects.outgoing.bytes"
)

// maxMeasurements bounds the measurements looked at.
const maxMeasurements = 16

func mapSwift(m *sdk.Message, out *sdk.Output) {
	et, ok := openstack.EventType(m)
	if !ok {
		return
	}
	e := out.Event()
	openstack.WriteHeader(m, e, et, "swift", "object_storage", -1)
	openstack.WriteStr(e, "resource_id", m.Get("payload.target.id"))
	openstack.WriteProject(m, e, m.Get("payload.initiator.project_id"))
	openstack.WriteUser(m, e, m.Get("payload.initiator.id"))
	openstack.WriteAction(e, et, "objectstore.http.")

	a := e.Object("attributes")
	openstack.WriteStr(a, "method", m.Get("payload.target.action"))
	openstack.WriteStr(a, "container", m.Get("payload.target.metadata.container"))
	openstack.WriteStr(a, "object", m.Get("payload.target.metadata.object"))
	var received, sent sdk.Value
	if m.Get("payload.measurements").Kind() == sdk.Array {
		var p openstack.PathBuf
		for i := 0; i < maxMeasurements; i++ {
			p.SetBase("payload.measurements", i)
			name := m.Get(p.At("metric.name"))
			if name.Kind() == sdk.Missing && m.Get(p.Base()).Kind() == sdk.Missing {
				break
			}
			switch {
			case name.Equal(metricIncoming) && received.Kind() == sdk.Missing:
				received = m.Get(p.At("result"))
			case name.Equal(metricOutgoing) && sent.Kind() == sdk.Missing:
				sent = m.Get(p.At("result"))
			}
		}
	}
	a.NumValue("bytes_received", received)
	a.NumValue("bytes_sent", sent)
	openstack.WriteStr(a, "outcome", m.Get("payload.outcome"))
	a.End()
	e.End()
}
