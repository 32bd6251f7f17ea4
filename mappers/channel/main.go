// Command channel is the built-in mapper for usage messages published on the
// collector's local message channel (docs/channel.md) under the tags usage
// and usage.*. Build it to WebAssembly with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o channel.wasm .
//
// The channel hands it an envelope:
//
//	{"event_type":"<tag>",
//	 "channel":{"type":"JSON"|"STRING","published_at":"<RFC 3339>","uid":N,"gid":N},
//	 "message":<the message>}
//
// A JSON message is an object in the generic usage shape (or an array of up
// to 100 of them, one event each):
//
//	{"id":"...", "time":"...", "type":"license.usage", "service":"flexlm",
//	 "resource_type":"license", "resource_id":"matlab-7", "project_id":"p1",
//	 "user_id":"u1", "action":"checkout", "attributes":{"seats":3}}
//
// where event_id, timestamp and event_type are accepted for id, time and
// type. A STRING message carries the same members as key=value pairs
// ("type=license.usage resource_type=license resource_id=matlab-7
// project_id=p1 seats=3"); a value with spaces is double-quoted, and a key
// the shape does not name becomes an attribute.
//
// Defaults: the time of the publish call for a missing time, the tag for a
// missing type (or an empty one, an object, an array), "channel" for a missing service, and for a missing action the
// last segment of the type (".start" and ".end" dropped first). Without an
// id the collector derives one from the message, so a message sent again
// yields the same event. Attributes keep strings, numbers and booleans;
// nested objects and arrays are left out, and so are numbers outside the
// event contract (negative, non-finite, over 2^53-1), and every member whose name
// suggests a credential by the collector's one rule (wasm-sdk/secret:
// password, token, secret, cookie, api_key, Authorization and the like).
package main

import (
	"strings"
	"unsafe"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/contract"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonstr"
	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/secret"
)

var manifest = sdk.Manifest{
	Name:       "channel",
	Version:    "1.0.0",
	EventTypes: []string{"usage", "usage.*"},
	Releases:   []string{"channel-v1"},
}

func init() { sdk.Register(manifest, mapChannel) }

func main() {}

const maxEvents = 100

// A module instance maps one message at a time, so its scratch space is
// package-level and reused: the common message costs no allocation and two
// crossings into the host (envelope, then members).
var (
	envelopePaths = []string{"event_type", "channel.type", "channel.published_at", "message"}
	env           [4]sdk.Value
	vals          = make([]sdk.Value, nPaths)
	pairs         [][2]string // a STRING message's key=value pairs
	pathBuf       []byte
	elemPaths     = make([]string, nPaths)
)

func mapChannel(m *sdk.Message, out *sdk.Output) {
	m.GetMany(envelopePaths, env[:])
	tag, typ, at, msg := env[0], env[1], env[2], env[3]
	if !typ.Exists() {
		// Not from the channel (a notification of the same type on the
		// bus): nothing to say about it.
		return
	}
	if tag.Kind() != sdk.String || len(tag.Raw()) == 0 {
		// Without a tag no event could have a type (the channel always
		// sends one): no event, as for any input without an event_type.
		return
	}
	switch {
	case typ.Equal("STRING"):
		if msg.Kind() != sdk.String {
			out.Error("STRING message is not a string")
			return
		}
		mapText(msg, tag, at, out)
	case msg.Kind() == sdk.Object:
		m.GetMany(objectPaths, vals)
		mapObject(tag, at, out)
	case msg.Kind() == sdk.Array:
		for i := 0; i < maxEvents; i++ {
			if !elementPaths(i) {
				break
			}
			m.GetMany(elemPaths, vals)
			if vals[nPaths-1].Kind() != sdk.Object {
				break
			}
			mapObject(tag, at, out)
		}
	default:
		out.Error("JSON message is neither an object nor an array of objects")
	}
}

// shape lists the members of the generic usage shape, by the names accepted
// for each: the first is the event's member name.
var shape = [nFields][]string{
	{"event_id", "id"},
	{"timestamp", "time"},
	{"event_type", "type"},
	{"service"},
	{"resource_type"},
	{"resource_id"},
	{"project_id"},
	{"user_id"},
	{"action"},
}

const (
	fID = iota
	fTime
	fType
	fService
	fResourceType
	fResourceID
	fProject
	fUser
	fAction
	nFields
)

// The paths asked of a message object: every accepted name of every member,
// in shape order, then the attributes, then the object itself.
var (
	pathNames   = flatten()
	nPaths      = len(pathNames)
	objectPaths = prefixed("message.")
)

func flatten() []string {
	var out []string
	for _, names := range shape {
		out = append(out, names...)
	}
	return append(out, "attributes", "")
}

func prefixed(p string) []string {
	out := make([]string, len(pathNames))
	for i, n := range pathNames {
		out[i] = strings.TrimSuffix(p+n, ".")
	}
	return out
}

// elementPaths points elemPaths at element i of a message array; false when
// the index does not fit.
func elementPaths(i int) bool {
	pathBuf = pathBuf[:0]
	starts := make([]int, 0, nPaths+1)
	for _, n := range pathNames {
		starts = append(starts, len(pathBuf))
		pathBuf = append(pathBuf, "message."...)
		pathBuf = appendInt(pathBuf, i)
		if n != "" {
			pathBuf = append(pathBuf, '.')
			pathBuf = append(pathBuf, n...)
		}
	}
	starts = append(starts, len(pathBuf))
	for j := range nPaths {
		elemPaths[j] = string(pathBuf[starts[j]:starts[j+1]])
	}
	return true
}

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

// field returns the first present value among the names of member f; an
// empty string counts as absent (an event never carries "").
func field(f int) sdk.Value {
	i := 0
	for j := 0; j < f; j++ {
		i += len(shape[j])
	}
	for k := range shape[f] {
		if v := vals[i+k]; v.Exists() && !(v.Kind() == sdk.String && len(v.Raw()) == 0) {
			return v
		}
	}
	return sdk.Value{}
}

// mapObject maps the object whose members vals holds.
func mapObject(tag, at sdk.Value, out *sdk.Output) {
	e := out.Event()
	e.StrValue("event_id", field(fID))
	if !e.Timestamp("timestamp", field(fTime)) {
		e.Timestamp("timestamp", at)
	}
	et := field(fType)
	if k := et.Kind(); k == sdk.Object || k == sdk.Array {
		et = sdk.Value{} // no type to write: the tag's
	}
	et = et.Or(tag)
	e.StrValue("event_type", et)
	if !e.StrValue("service", field(fService)) {
		e.Str("service", "channel")
	}
	e.StrValue("resource_type", field(fResourceType))
	e.StrValue("resource_id", field(fResourceID))
	e.StrValue("project_id", field(fProject))
	e.StrValue("user_id", field(fUser))
	if a := actionOf(unescaped(et.Raw())); !e.StrValue("action", field(fAction)) && a != "" {
		e.Str("action", a)
	}
	a := e.Object("attributes")
	if attrs := vals[nPaths-2]; attrs.Kind() == sdk.Object {
		writeMembers(a, attrs.Raw())
	}
	a.End()
	e.End()
}

// writeMembers copies the scalar members of a JSON object's text into a:
// strings, numbers and booleans; not nested objects or arrays, nor members
// whose name suggests a credential. Names with escapes are skipped.
func writeMembers(a *sdk.Event, obj []byte) {
	i := skipWS(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		ks := i + 1
		ke, clean := endOfString(obj, ks)
		if ke >= len(obj) {
			return
		}
		key := str(obj[ks:ke])
		i = skipWS(obj, ke+1)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipWS(obj, i+1)
		vs := i
		i = skipValue(obj, i)
		if clean && !secret.IsName(key) && vs < len(obj) && attributeName(key) {
			v := obj[vs:i]
			switch c := v[0]; {
			case c == '"':
				if s := unescaped(v[1 : len(v)-1]); contract.CheckAttributeText(bytesOf(s)) == contract.OK {
					a.StrValue(key, sdk.Text(s))
				}
			case c == 't':
				a.Bool(key, true)
			case c == 'f':
				a.Bool(key, false)
			case c == '-' || c >= '0' && c <= '9':
				a.Quantity(key, sdk.Text(str(v)))
			}
		}
		i = skipWS(obj, i)
		if i < len(obj) && obj[i] == ',' {
			i = skipWS(obj, i+1)
		}
	}
}

// attributeName reports whether key may name an attribute under the event
// contract (not blank, printable, bounded): the collector would drop it
// otherwise.
func attributeName(key string) bool {
	return contract.CheckText(bytesOf(key), contract.MaxAttributeNameBytes) == contract.OK
}

// bytesOf returns s's bytes without copying, for the contract's checks,
// which only read them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) } //nolint:gosec // G103: read only, while s lives

// endOfString returns the index of the closing quote of a string whose
// content starts at i, and whether the content has no escape.
func endOfString(b []byte, i int) (int, bool) {
	clean := true
	for i < len(b) {
		switch b[i] {
		case '"':
			return i, clean
		case '\\':
			clean = false
			i++
		}
		i++
	}
	return i, clean
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value at i.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		e, _ := endOfString(b, i+1)
		return e + 1
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				e, _ := endOfString(b, i+1)
				i = e
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' {
		i++
	}
	return i
}

// unescaped returns the content of a JSON string as text: as it is when it
// has no escape, else decoded (\u escapes and surrogate pairs included, a
// lone surrogate as U+FFFD, as encoding/json reads it).
func unescaped(raw []byte) string {
	if !hasByte(raw, '\\') {
		return str(raw)
	}
	return string(jsonstr.AppendUnescaped(make([]byte, 0, len(raw)), raw))
}

func hasByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// str views b as a string without copying; valid while b is.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) } //nolint:gosec // G103: valid while b is, and b is not written meanwhile

// mapText maps a STRING message of key=value pairs.
func mapText(msg, tag, at sdk.Value, out *sdk.Output) {
	splitPairs(unescaped(msg.Raw()))
	var f [nFields]string
	var have [nFields]bool
	e := out.Event()
	for _, kv := range pairs {
		if idx := shapeIndex(kv[0]); idx >= 0 && !have[idx] && kv[1] != "" {
			f[idx], have[idx] = kv[1], true
		}
	}
	if f[fID] != "" {
		e.Str("event_id", f[fID])
	}
	if !have[fTime] || !e.Timestamp("timestamp", sdk.Text(f[fTime])) {
		e.Timestamp("timestamp", at)
	}
	et := f[fType]
	if et == "" {
		et = str(tag.Raw())
	}
	e.Str("event_type", et)
	if f[fService] != "" {
		e.Str("service", f[fService])
	} else {
		e.Str("service", "channel")
	}
	for _, i := range [...]int{fResourceType, fResourceID, fProject, fUser} {
		if have[i] {
			e.Str(shape[i][0], f[i])
		}
	}
	if f[fAction] != "" {
		e.Str("action", f[fAction])
	} else if a := actionOf(et); a != "" {
		e.Str("action", a)
	}
	a := e.Object("attributes")
	for _, kv := range pairs {
		if shapeIndex(kv[0]) >= 0 || secret.IsName(kv[0]) || !attributeName(kv[0]) {
			continue
		}
		switch {
		case kv[1] == "true":
			a.Bool(kv[0], true)
		case kv[1] == "false":
			a.Bool(kv[0], false)
		case sdk.Text(kv[1]).IsNumeric():
			a.Quantity(kv[0], sdk.Text(kv[1])) // out of the contract's range: left out
		case contract.CheckAttributeText(bytesOf(kv[1])) == contract.OK:
			a.Str(kv[0], kv[1])
		}
	}
	a.End()
	e.End()
}

func shapeIndex(k string) int {
	for i, names := range shape {
		for _, n := range names {
			if k == n {
				return i
			}
		}
	}
	return -1
}

// actionOf is the last segment of an event type, ".start" and ".end"
// dropped first: "license.checkout.end" gives "checkout". A type that ends
// in a dot gives "", and the event no action.
func actionOf(et string) string {
	et = strings.TrimSuffix(strings.TrimSuffix(et, ".start"), ".end")
	if i := strings.LastIndexByte(et, '.'); i >= 0 {
		return et[i+1:]
	}
	return et
}

// splitPairs splits "k=v k2=\"a b\" flag" into pairs (package-level
// pairs); a bare word is a key with the value "true". In a quoted value \"
// and \\ stand for " and \.
func splitPairs(s string) {
	pairs = pairs[:0]
	i := 0
	for i < len(s) {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			break
		}
		ks := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' && s[i] != '\t' {
			i++
		}
		k := s[ks:i]
		if i >= len(s) || s[i] != '=' {
			if k != "" {
				pairs = append(pairs, [2]string{k, "true"})
			}
			continue
		}
		i++ // '='
		var v string
		if i < len(s) && s[i] == '"' {
			i++
			vs := i
			esc := false
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' && i+1 < len(s) {
					esc = true
					i++
				}
				i++
			}
			v = s[vs:min(i, len(s))]
			i++ // closing quote
			if esc {
				// Unescaped into a buffer of its own: the values already
				// taken keep pointing into the older buffer.
				b := make([]byte, 0, len(v))
				for j := 0; j < len(v); j++ {
					if v[j] == '\\' && j+1 < len(v) {
						j++
					}
					b = append(b, v[j])
				}
				v = string(b)
			}
		} else {
			vs := i
			for i < len(s) && s[i] != ' ' && s[i] != '\t' {
				i++
			}
			v = s[vs:i]
		}
		if k != "" {
			pairs = append(pairs, [2]string{k, v})
		}
	}
}
