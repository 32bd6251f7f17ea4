package sdk

import (
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi/kind"
)

// This file fixes the public API of the guest SDK. Bodies are filled in by the
// implementation files; mapper code is written against these signatures.

// Kind is the JSON kind of a looked-up value (the numbering is the ABI's).
type Kind uint8

// Kinds, numbered as in the ABI (the one table is package kind's).
const (
	Missing Kind = kind.Missing
	Null    Kind = kind.Null
	String  Kind = kind.String
	Number  Kind = kind.Number
	True    Kind = kind.True
	False   Kind = kind.False
	Object  Kind = kind.Object
	Array   Kind = kind.Array
)

// Manifest describes a mapper module; the SDK serialises it for tally_manifest.
type Manifest struct {
	Name       string
	Version    string
	EventTypes []string
	Releases   []string
}

// MapFunc maps one notification to zero or more events written to out.
// It must not retain msg, its Values or out after returning.
type MapFunc func(msg *Message, out *Output)

// Value is a looked-up member of the input. Raw is a view into the input (for a
// string: the characters between the quotes, still JSON-escaped); it is valid only
// during the MapFunc call.
type Value struct {
	kind Kind
	raw  []byte
}

// Message is the notification being mapped.
type Message struct {
	raw    []byte   // the input; field offsets point into it
	host   abi.Host // answers lookups (the host import, or a native index)
	packed []uint64 // GetMany's results as the host packs them, reused
}

// Output collects the events of one call. Events are written with an
// allocation-free builder into a buffer the SDK reuses across calls.
type Output struct {
	buf     []byte  // the tally_map document being written; reused across calls
	nEv     int     // events begun so far
	depth   int     // open objects: 0 between events, 1 inside an event, more when nested
	first   bool    // the next member is the first of its object (no comma)
	failed  bool    // Error was called
	errMsg  string  // its reason
	ev      Event   // the one builder handed out, so Event and Object do not allocate
	scratch []byte  // reused for re-escaping malformed strings
	ops     opTable // in a guest: the tally.emit operations of the call (emit_wasip1.go)
}

// Event is the builder of one event (or of a nested object inside it).
type Event struct {
	out *Output
}

// (Event carries no state of its own: the nesting lives in Output, so every
// *Event of a call is the same pointer and handing one out costs nothing.)

// Level is a log level for Log.
type Level int32

const (
	LevelDebug Level = 0
	LevelInfo  Level = 1
	LevelWarn  Level = 2
	LevelError Level = 3
)

// Signatures (implemented elsewhere in the package):
//
//	func Register(m Manifest, f MapFunc)            // call once from the mapper's init()
//	func Log(level Level, msg string)
//	func (m *Message) Get(path string) Value         // ABI path syntax (docs/abi.md)
//	func (m *Message) GetMany(paths []string, out []Value) // Get for each path, one host call
//	func (m *Message) Raw() []byte                   // the whole input as it arrived
//	func Text(s string) Value                        // s as a string Value, for text the mapper parsed itself
//	func (v Value) Kind() Kind
//	func (v Value) Exists() bool                     // present and not null
//	func (v Value) Raw() []byte
//	func (v Value) Equal(s string) bool              // string kind, decoded text equals s
//	func (v Value) HasPrefix(s string) bool          // string kind, decoded text
//	func (v Value) HasSuffix(s string) bool          // string kind, decoded text
//	func (v Value) IsNumeric() bool                  // number, or a string holding one
//	func (v Value) Int() (int64, bool)               // number (integral) or a string holding one
//	func (v Value) Float() (float64, bool)           // number or a string holding one
//	func (v Value) Or(w Value) Value                 // v if it Exists and is not an empty string, else w
//	func (v Value) String() string                   // unescaped copy (allocates: tests, rare paths)
//	func (o *Output) Event() *Event                  // begin a new top-level event
//	func (o *Output) Error(reason string)            // answer {"error": reason} instead of events
//	func (e *Event) Str(key, val string)             // literal string, escaped by the builder
//	func (e *Event) StrValue(key string, v Value) bool    // string: copied raw; number/bool: written as a string; missing/null: omitted. Reports whether written
//	func (e *Event) NumValue(key string, v Value) bool    // number, or string holding a number: written as a JSON number; otherwise omitted
//	func (e *Event) Quantity(key string, v Value) bool    // NumValue within the event contract's range for key (wasm-sdk/contract): negative, non-finite, out of range omitted
//	func (e *Event) Int(key string, n int64)
//	func (e *Event) Bool(key string, b bool)
//	func (e *Event) Timestamp(key string, v Value) bool   // oslo "2024-05-01 12:00:00[.ffffff]", ISO 8601 with T, optional zone/Z -> RFC 3339 UTC with Z; omitted if unparsable
//	func (e *Event) Object(key string) *Event        // begin a nested object; close it with End
//	func (e *Event) End()                            // close the nested object, or the event itself
//
// Native testing (files built without wasip1):
//
//	func MapJSON(f MapFunc, input []byte) ([]byte, error)  // runs f natively on input, returns the tally_map output document
