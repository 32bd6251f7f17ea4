// Package sdk is the Go guest SDK for tally mappers: WebAssembly modules,
// built with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared, that turn one
// OpenStack notification into canonical usage events inside the collector.
//
// A mapper author writes a manifest and one function; the SDK implements the
// whole of ABI v1 (docs/abi.md): it exports tally_abi_version_1, tally_alloc,
// tally_manifest and tally_map, and is the only code that touches the host
// imports (tally.field, tally.fields, tally.log, in internal/abi).
//
// # A complete mapper
//
//	// Command glance maps image uploads.
//	package main
//
//	import sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
//
//	func init() {
//		// A reactor module runs package initialisation, never main.
//		sdk.Register(sdk.Manifest{
//			Name:       "glance",
//			Version:    "1.0.0",
//			EventTypes: []string{"image.upload", "image.delete"},
//			Releases:   []string{"2024.1"},
//		}, mapImage)
//	}
//
//	func mapImage(msg *sdk.Message, out *sdk.Output) {
//		e := out.Event()
//		e.StrValue("event_id", msg.Get("message_id"))
//		e.Timestamp("timestamp", msg.Get("timestamp"))
//		e.StrValue("event_type", msg.Get("event_type"))
//		e.Str("service", "glance")
//		e.Str("resource_type", "image")
//		e.StrValue("resource_id", msg.Get("payload.id"))
//		e.StrValue("project_id", msg.Get("payload.owner").Or(msg.Get("_context_project_id")))
//		if msg.Get("event_type").Equal("image.upload") {
//			e.Str("action", "upload")
//		} else {
//			e.Str("action", "delete")
//		}
//		a := e.Object("attributes")
//		a.Quantity("size_bytes", msg.Get("payload.size"))
//		a.StrValue("disk_format", msg.Get("payload.disk_format"))
//		a.End()
//		e.End()
//	}
//
//	func main() {}
//
// Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o glance.wasm ./glance
//
// and test the same function natively with MapJSON, which returns exactly
// the document the module would answer (see the example).
//
// # The module
//
// The SDK is a Go module of its own, github.com/tally-billing/tally-openstack-collector/wasm-sdk,
// which requires nothing outside the standard library: a mapper's module
// needs it alone. In a module of your own (go mod init), a replace directive
// points the SDK at the wasm-sdk directory of a clone of the collector's
// repository, and go mod tidy adds the requirement. Inside that repository,
// `tally-openstack-collector mapper new NAME` writes a new mapper's directory
// with its tests (docs/writing-mappers.md).
//
// # How a call runs
//
// The host writes the notification into the buffer tally_alloc handed out,
// parses it once natively, and calls tally_map. Message.Get sends the path to
// the host (tally.field) and receives a kind and a span of the guest's own
// copy of the input: nothing is copied, nothing is parsed in the guest.
// Message.GetMany does the same for a list of paths with one crossing into
// the host (tally.fields); a mapper that reads many members should use it. In
// a guest the Event builder writes no JSON: each of its calls records one
// operation of the tally.emit import (a Value of the input by its offset
// there, keys and text copied into a reused arena), the table goes to the
// host when the MapFunc returns, the host writes the events (docs/abi.md,
// "emit") and tally_map returns 0. Natively (MapJSON) the builder appends the
// escaped members into one output buffer, Value spans copied as they arrived:
// the same document the host writes from the operations. The host fills each
// event's "source" afterwards: a mapper does not write it.
//
// # Invariants
//
//   - No heap allocation per call once the buffers have grown: Value is a
//     kind and a slice, Event is one pointer the Output hands out again and
//     again, numbers and timestamps are formatted by hand, strings escaped by
//     hand (no fmt, strconv.Quote, encoding/json or time). Tests check it
//     natively with testing.AllocsPerRun and inside wazero with the guest's
//     own runtime.MemStats.
//   - Buffers: the input buffer (tally_alloc), the table of operations, its
//     arena and the output buffer (an error answer; natively, every answer)
//     are each one growable slice reused for the life of the instance; the
//     output stays valid until the next call, as the ABI requires.
//   - A MapFunc must not keep msg, a Value, out or an *Event after it
//     returns: they all point into reused buffers.
//   - The builder always produces valid JSON (in a guest, the host writes it
//     from the operations, by the same rules): quotes, backslashes and control
//     characters are escaped, invalid UTF-8 becomes U+FFFD, objects left open
//     are closed, writes after the event's final End are ignored.
//   - A panic in a MapFunc is recovered and answered {"error":"panic: ..."};
//     the instance stays usable.
//   - Concurrency: a module instance is single-threaded (the host never
//     enters one concurrently), so the guest state is package-level and
//     unsynchronised. MapJSON, natively, is safe for concurrent use.
//
// # Native tests
//
// Files built without wasip1 replace the host imports with the collector's
// own indexer (package jsonindex of this module), so a lookup answers under go test exactly
// what it answers in the runtime, and Log writes to standard error. Where the
// collector stops a call at its deadline, a native call is stopped at its
// MaxNativeLookups+1st lookup (MapJSON returns ErrLookupBudget): a map
// function that loops fails its test deterministically instead of hanging it.
//
// # Subpackages
//
// wasm-sdk/openstack holds what OpenStack mappers share on top of this
// package: the members every event begins with, the project and user
// fallbacks to the request context, the action derived from the event type,
// and paths built at run time. It follows the same invariants (no allocation
// per call) and, like this package, is compiled into the mapper; the host
// imports neither.
package sdk
