package sdk

import (
	"math"
	"strconv"
	"unsafe"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/contract"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/internal/abi"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
)

// Get looks path up in the input (ABI path syntax: members separated by '.',
// a decimal segment indexes an array, `\.` is a literal dot, "" is the whole
// document). The host answers with a span of the guest's own copy of the
// input, so nothing is copied and nothing is allocated. A path that is absent,
// or any path when the input is not JSON, yields a Value of kind Missing.
func (m *Message) Get(path string) Value {
	return m.value(m.host.Field(path))
}

// GetMany looks every path up at once and stores in out[i] what Get(paths[i])
// would return; out must be at least as long as paths. In a guest it is one
// crossing into the host (the tally.fields import) instead of one per path,
// so a mapper that needs many members should ask for them together:
//
//	var paths = []string{"message_id", "timestamp", "payload.instance_id"}
//
//	func mapIt(msg *sdk.Message, out *sdk.Output) {
//		var v [3]sdk.Value
//		msg.GetMany(paths, v[:])
//		...
//	}
//
// Neither paths nor out is retained; nothing is allocated once the SDK's
// scratch space has grown to the longest list seen.
func (m *Message) GetMany(paths []string, out []Value) {
	out = out[:len(paths)]
	if cap(m.packed) < len(paths) {
		m.packed = make([]uint64, len(paths))
	}
	packed := m.packed[:len(paths)]
	m.host.Fields(paths, packed)
	for i, p := range packed {
		out[i] = m.value(p)
	}
}

// value turns a packed lookup result into a Value, bounds-checked against
// the input: a span outside it reads as missing.
func (m *Message) value(p uint64) Value {
	kind, start, n := abi.Unpack(p)
	if k := Kind(kind); k == Missing || k > Array || start+n > len(m.raw) {
		return Value{}
	}
	return Value{kind: Kind(kind), raw: m.raw[start : start+n : start+n]}
}

// Raw returns the whole input exactly as it arrived (not necessarily JSON).
// It is valid only during the MapFunc call.
func (m *Message) Raw() []byte { return m.raw }

// Text returns s as a string Value, for text a mapper took apart itself (a
// key=value message): StrValue, NumValue, Timestamp and the comparisons take
// it as they take a string member of the input. It allocates only when s
// needs escaping.
func Text(s string) Value {
	if jsonstr.Plain(s) {
		return Value{kind: String, raw: unsafe.Slice(unsafe.StringData(s), len(s))} //nolint:gosec // zero-copy view of s's bytes: the package only reads raw, and Raw's callers must not change it
	}
	return Value{kind: String, raw: jsonstr.AppendEscaped(nil, s)}
}

// Kind reports the JSON kind of v.
func (v Value) Kind() Kind { return v.kind }

// Exists reports whether v is present and not null.
func (v Value) Exists() bool { return v.kind != Missing && v.kind != Null }

// Raw returns the bytes of v in the input: for a string the characters
// between the quotes, still JSON-escaped; otherwise the JSON text. The
// bytes must not be changed: they are the input's, or those of the string
// given to Text.
func (v Value) Raw() []byte { return v.raw }

// Equal reports whether v is a string whose text, as a JSON reader decodes
// it, is s: "compute\u002einstance.exists" equals "compute.instance.exists".
// A value without escapes is compared as it is, without decoding.
func (v Value) Equal(s string) bool {
	var buf [256]byte
	t, ok := v.text(buf[:0])
	return ok && string(t) == s
}

// HasPrefix reports whether v is a string whose decoded text begins with s.
func (v Value) HasPrefix(s string) bool {
	var buf [256]byte
	t, ok := v.text(buf[:0])
	return ok && len(t) >= len(s) && string(t[:len(s)]) == s
}

// HasSuffix reports whether v is a string whose decoded text ends with s.
func (v Value) HasSuffix(s string) bool {
	var buf [256]byte
	t, ok := v.text(buf[:0])
	return ok && len(t) >= len(s) && string(t[len(t)-len(s):]) == s
}

// text returns the decoded text of a string value: its raw bytes when they
// hold no escape, else their decoding appended to buf. ok is false for any
// other kind.
func (v Value) text(buf []byte) (t []byte, ok bool) {
	if v.kind != String {
		return nil, false
	}
	if !hasBackslash(v.raw) {
		return v.raw, true
	}
	return jsonstr.AppendUnescaped(buf, v.raw), true
}

// hasBackslash reports whether raw string content holds a JSON escape.
func hasBackslash(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' {
			return true
		}
	}
	return false
}

// Or returns v if it exists and is not an empty string, else w. It chains the
// fallbacks of a mapping: msg.Get("payload.tenant_id").Or(msg.Get("_context_project_id")).
func (v Value) Or(w Value) Value {
	if !v.Exists() || (v.kind == String && len(v.raw) == 0) {
		return w
	}
	return v
}

// IsNumeric reports whether v is a number, or a string holding exactly a
// JSON number: what NumValue and Quantity take.
func (v Value) IsNumeric() bool {
	_, ok := v.numeric()
	return ok
}

// numeric returns the JSON number text of v: a number, or a string holding
// exactly a JSON number ("512", "1.5e3"; no spaces, no sign other than '-').
func (v Value) numeric() ([]byte, bool) {
	if (v.kind == Number || v.kind == String) && isJSONNumber(v.raw) {
		return v.raw, true
	}
	return nil, false
}

// Int returns v as an integer: a number with an integral value that fits in
// an int64 (512, -3, 2.0, 1e3), or a string holding one.
func (v Value) Int() (int64, bool) {
	b, ok := v.numeric()
	if !ok {
		return 0, false
	}
	if n, ok := parseInt(b); ok {
		return n, true
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(b), len(b)), 64) //nolint:gosec // zero-copy view of v's bytes for the call only; ParseFloat keeps no reference (its error holds a copy)
	if err != nil || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false
	}
	return int64(f), true
}

// Float returns v as a float64: a number, or a string holding one.
func (v Value) Float() (float64, bool) {
	b, ok := v.numeric()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(b), len(b)), 64) //nolint:gosec // zero-copy view of v's bytes for the call only; ParseFloat keeps no reference (its error holds a copy)
	if err != nil {
		return 0, false
	}
	return f, true
}

// String returns a copy of v: for a string its unescaped text, for a number,
// boolean, object or array its JSON text, for null and missing "". It
// allocates; meant for tests and rare paths, not for building events.
func (v Value) String() string {
	switch v.kind {
	case Missing, Null:
		return ""
	case String:
		return string(jsonstr.AppendUnescaped(nil, v.raw))
	default:
		return string(v.raw)
	}
}

// parseInt parses -?[0-9]+ without overflow.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return int64(-n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

// isJSONNumber reports whether b is exactly a JSON number (contract.IsNumber).
func isJSONNumber(b []byte) bool { return contract.IsNumber(b) }
