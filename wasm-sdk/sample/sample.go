// Package sample is a small, realistic mapping of nova's legacy
// compute.instance.* notifications, written against the SDK the way a
// production mapper is. The sample and memstats test guests are built from it,
// and the SDK's own tests use it for the allocation and speed checks.
package sample

import sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"

// Manifest of the sample guest.
var Manifest = sdk.Manifest{
	Name:       "sample",
	Version:    "1.0.0",
	EventTypes: []string{"compute.instance.*", "!compute.instance.*.start"},
	Releases:   []string{"2023.1", "2024.1"},
}

const prefix = "compute.instance."

// paths are the payload members Map reads, looked up with one host call.
var paths = []string{
	"payload.instance_id", "payload.tenant_id", "payload.project_id", "payload.user_id",
	"payload.instance_type", "payload.instance_flavor_id", "payload.instance_type_id",
	"payload.vcpus", "payload.memory_mb", "payload.root_gb", "payload.ephemeral_gb", "payload.disk_gb",
	"payload.state", "payload.image_ref", "payload.availability_zone", "payload.host",
	"payload.launched_at", "payload.terminated_at", "payload.deleted_at",
}

// Map turns one compute.instance.* notification into one instance event.
func Map(msg *sdk.Message, out *sdk.Output) {
	et := msg.Get("event_type")
	if !et.HasPrefix(prefix) {
		out.Error("not a compute.instance notification")
		return
	}
	var p [19]sdk.Value // in the order of paths
	msg.GetMany(paths, p[:])
	e := out.Event()
	e.StrValue("event_id", msg.Get("message_id"))
	e.Timestamp("timestamp", msg.Get("timestamp"))
	e.StrValue("event_type", et)
	e.Str("service", "nova")
	e.Str("resource_type", "instance")
	e.StrValue("resource_id", p[0])
	e.StrValue("project_id", p[1].Or(p[2]).Or(msg.Get("_context_project_id")))
	e.StrValue("user_id", p[3].Or(msg.Get("_context_user_id")))
	e.Str("action", action(et.Raw()[len(prefix):]))

	a := e.Object("attributes")
	a.StrValue("flavor_name", p[4])
	a.StrValue("flavor_id", p[5].Or(p[6]))
	a.NumValue("vcpus", p[7])
	a.NumValue("memory_mb", p[8])
	a.NumValue("root_gb", p[9])
	a.NumValue("ephemeral_gb", p[10])
	a.NumValue("disk_gb", p[11])
	a.StrValue("state", p[12])
	a.StrValue("image_ref", p[13])
	a.StrValue("availability_zone", p[14])
	a.StrValue("host", p[15])
	a.Timestamp("launched_at", p[16])
	a.Timestamp("terminated_at", p[17])
	a.Timestamp("deleted_at", p[18])
	a.End()
	e.End()
}

// action drops the ".start"/".end" phase from the verb of the event type.
// The conversion to string does not allocate: Str does not keep it and verbs
// are short.
func action(verb []byte) string {
	for _, phase := range [...]string{".start", ".end"} {
		if n := len(verb) - len(phase); n > 0 && string(verb[n:]) == phase {
			verb = verb[:n]
			break
		}
	}
	return string(verb)
}
