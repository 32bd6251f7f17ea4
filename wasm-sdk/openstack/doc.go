// Package openstack holds the helpers shared by OpenStack mappers: the
// members every event begins with (event_id, timestamp, event_type, service,
// resource_type; then resource_id, project_id, user_id and action, which
// WriteSubject writes together), the project and user fallbacks to the
// request context, the action derived from the event type, the audit period
// of a periodic audit notification, and lookup paths built at run time.
//
// It is part of the guest SDK: a mapper imports it next to package sdk and it
// is compiled into the mapper's module. The host never imports it.
//
// An event begins with one call: [Begin] for a mapper that looks up its
// members one by one (Message.Get), as below; [Start] for one that looks them
// up together (Message.GetMany) with a lookup list built by [Paths], which
// puts the header's members first.
//
//	func mapVolume(m *sdk.Message, out *sdk.Output) {
//		e, et, ok := openstack.Begin(m, out, "cinder", "volume")
//		if !ok {
//			return
//		}
//		openstack.WriteAction(e, et, "volume.")
//		openstack.WriteProject(m, e, m.Get("payload.tenant_id"))
//		openstack.WriteUser(m, e, m.Get("payload.user_id"))
//		openstack.WriteStr(e, "resource_id", m.Get("payload.volume_id"))
//	}
//
// # Usable values
//
// A value is usable as a string member when it is a non-empty string or a
// number. Everything else (Missing, null, "", a boolean, an object, an array)
// is left out of the event rather than written: a mapper never fails on a
// member of the wrong kind.
//
// # Cost
//
// The helpers are on the hot path of every mapper and allocate nothing: text
// without escapes is handed to the event builder without a copy, and paths and
// bulk event ids are built in fixed buffers on the stack. The builder copies
// what it is given, so nothing returned here needs to outlive the call that
// produced it.
//
// Nothing in the package keeps state; a [PathBuf] belongs to one caller.
package openstack
