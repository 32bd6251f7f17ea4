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

// Map turns one compute.instance.* notification into one instance event.
func Map(msg *sdk.Message, out *sdk.Output) {
	et := msg.Get("event_type")
	if !et.HasPrefix(prefix) {
		out.Error("not a compute.instance notification")
		return
	}
	e := out.Event()
	e.StrValue("event_id", msg.Get("message_id"))
	e.Timestamp("timestamp", msg.Get("timestamp"))
	e.StrValue("event_type", et)
	e.Str("service", "nova")
	e.Str("resource_type", "instance")
	e.StrValue("resource_id", msg.Get("payload.instance_id"))
	e.StrValue("project_id", msg.Get("payload.tenant_id").
		Or(msg.Get("payload.project_id")).
		Or(msg.Get("_context_project_id")))
	e.StrValue("user_id", msg.Get("payload.user_id").Or(msg.Get("_context_user_id")))
	e.Str("action", action(et.Raw()[len(prefix):]))

	a := e.Object("attributes")
	a.StrValue("flavor_name", msg.Get("payload.instance_type"))
	a.StrValue("flavor_id", msg.Get("payload.instance_flavor_id").Or(msg.Get("payload.instance_type_id")))
	a.NumValue("vcpus", msg.Get("payload.vcpus"))
	a.NumValue("memory_mb", msg.Get("payload.memory_mb"))
	a.NumValue("root_gb", msg.Get("payload.root_gb"))
	a.NumValue("ephemeral_gb", msg.Get("payload.ephemeral_gb"))
	a.NumValue("disk_gb", msg.Get("payload.disk_gb"))
	a.StrValue("state", msg.Get("payload.state"))
	a.StrValue("image_ref", msg.Get("payload.image_ref"))
	a.StrValue("availability_zone", msg.Get("payload.availability_zone"))
	a.StrValue("host", msg.Get("payload.host"))
	a.Timestamp("launched_at", msg.Get("payload.launched_at"))
	a.Timestamp("terminated_at", msg.Get("payload.terminated_at"))
	a.Timestamp("deleted_at", msg.Get("payload.deleted_at"))
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
