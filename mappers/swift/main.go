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

// paths are the members read, looked up together with one host call. The
// middleware sends at most two measurements; they are among them, and any
// further one is looked up on its own.
var paths = openstack.Paths(
	"payload.target.id",
	"payload.initiator.project_id",
	"payload.initiator.id",
	"payload.target.action",
	"payload.target.metadata.container",
	"payload.target.metadata.object",
	"payload.outcome",
	"payload.measurements",
	"payload.measurements.0.metric.name",
	"payload.measurements.0.result",
	"payload.measurements.1.metric.name",
	"payload.measurements.1.result",
	"payload.measurements.2",
)

// Indexes into paths.
const (
	pAccount = openstack.HeaderLen + iota
	pProject
	pUser
	pMethod
	pContainer
	pObject
	pOutcome
	pMeasurements
	pName0
	pResult0
	pName1
	pResult1
	pMore
	nPaths
)

func mapSwift(m *sdk.Message, out *sdk.Output) {
	var v [nPaths]sdk.Value
	m.GetMany(paths, v[:])
	e, et, ok := openstack.Start(out, v[:], "swift", "object_storage")
	if !ok {
		return
	}
	openstack.WriteSubject(m, e, et, v[pAccount], v[pProject], v[pUser], "objectstore.http.")

	a := e.Object("attributes")
	openstack.WriteStr(a, "method", v[pMethod])
	openstack.WriteStr(a, "container", v[pContainer])
	openstack.WriteStr(a, "object", v[pObject])
	var received, sent sdk.Value
	take := func(name, result sdk.Value) {
		switch {
		case name.Equal(metricIncoming) && received.Kind() == sdk.Missing:
			received = result
		case name.Equal(metricOutgoing) && sent.Kind() == sdk.Missing:
			sent = result
		}
	}
	if v[pMeasurements].Kind() == sdk.Array {
		take(v[pName0], v[pResult0])
		take(v[pName1], v[pResult1])
		if v[pMore].Kind() != sdk.Missing {
			var p openstack.PathBuf
			for i := 2; i < maxMeasurements; i++ {
				p.SetBase("payload.measurements", i)
				if m.Get(p.Base()).Kind() == sdk.Missing {
					break
				}
				name := m.Get(p.At("metric.name"))
				take(name, m.Get(p.At("result")))
			}
		}
	}
	a.Quantity("bytes_received", received)
	a.Quantity("bytes_sent", sent)
	openstack.WriteStr(a, "outcome", v[pOutcome])
	a.End()
	e.End()
}
