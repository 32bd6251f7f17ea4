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
// missing type, "channel" for a missing service, and for a missing action the
// last segment of the type (".start" and ".end" dropped first). Without an
// id the collector derives one from the message, so a message sent again
// yields the same event. Attributes keep strings, numbers and booleans;
// nested objects and arrays are left out, and so is every member whose name
// suggests a credential (password, token, secret, connection_info).
package main

import (
	"strings"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
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

func mapChannel(m *sdk.Message, out *sdk.Output) {
	var env [4]sdk.Value
	m.GetMany(envelopePaths, env[:])
	tag, typ, at, msg := env[0], env[1], env[2], env[3]
	if !typ.Exists() {
		// Not from the channel (a notification of the same type on the
		// bus): nothing to say about it.
		return
	}
	switch {
	case typ.Equal("STRING"):
		if msg.Kind() != sdk.String {
			out.Error("STRING message is not a string")
			return
		}
		mapText(msg.String(), tag, at, out)
	case msg.Kind() == sdk.Object:
		mapObject(m, "message.", tag, at, out)
	case msg.Kind() == sdk.Array:
		for i := 0; i < maxEvents; i++ {
			p := "message." + itoa(i) + "."
			if m.Get(strings.TrimSuffix(p, ".")).Kind() != sdk.Object {
				break
			}
			mapObject(m, p, tag, at, out)
		}
	default:
		out.Error("JSON message is neither an object nor an array of objects")
	}
}

var envelopePaths = []string{"event_type", "channel.type", "channel.published_at", "message"}

// shape lists the members of the generic usage shape, by the names accepted
// for each: the first is the event's member name.
var shape = [][]string{
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

// mapObject maps the object at prefix (a path ending in '.').
func mapObject(m *sdk.Message, prefix string, tag, at sdk.Value, out *sdk.Output) {
	var f [nFields]sdk.Value
	for i, names := range shape {
		for _, n := range names {
			if v := m.Get(prefix + n); v.Exists() {
				f[i] = v
				break
			}
		}
	}
	e := out.Event()
	e.StrValue("event_id", f[fID])
	if !e.Timestamp("timestamp", f[fTime]) {
		e.Timestamp("timestamp", at)
	}
	et := f[fType].Or(tag)
	e.StrValue("event_type", et)
	if !e.StrValue("service", f[fService]) {
		e.Str("service", "channel")
	}
	e.StrValue("resource_type", f[fResourceType])
	e.StrValue("resource_id", f[fResourceID])
	e.StrValue("project_id", f[fProject])
	e.StrValue("user_id", f[fUser])
	if !e.StrValue("action", f[fAction]) {
		e.Str("action", actionOf(et.String()))
	}
	a := e.Object("attributes")
	attrs := m.Get(prefix + "attributes")
	if attrs.Kind() == sdk.Object {
		for _, k := range memberNames(attrs.Raw()) {
			if isSecretName(k) {
				continue
			}
			v := m.Get(prefix + "attributes." + escapePath(k))
			switch v.Kind() {
			case sdk.String:
				a.StrValue(k, v)
			case sdk.Number:
				a.NumValue(k, v)
			case sdk.True:
				a.Bool(k, true)
			case sdk.False:
				a.Bool(k, false)
			}
		}
	}
	a.End()
	e.End()
}

// mapText maps a STRING message of key=value pairs.
func mapText(s string, tag, at sdk.Value, out *sdk.Output) {
	var f [nFields]string
	var have [nFields]bool
	var extra [][2]string
	for _, kv := range splitPairs(s) {
		k, v := kv[0], kv[1]
		idx := -1
		for i, names := range shape {
			for _, n := range names {
				if k == n {
					idx = i
				}
			}
		}
		if idx >= 0 {
			if !have[idx] {
				f[idx], have[idx] = v, true
			}
			continue
		}
		if !isSecretName(k) {
			extra = append(extra, kv)
		}
	}
	e := out.Event()
	if have[fID] && f[fID] != "" {
		e.Str("event_id", f[fID])
	}
	if !have[fTime] || !e.Timestamp("timestamp", sdk.Text(f[fTime])) {
		e.Timestamp("timestamp", at)
	}
	et := f[fType]
	if et == "" {
		et = tag.String()
	}
	e.Str("event_type", et)
	if f[fService] != "" {
		e.Str("service", f[fService])
	} else {
		e.Str("service", "channel")
	}
	for _, i := range []int{fResourceType, fResourceID, fProject, fUser} {
		if have[i] {
			e.Str(shape[i][0], f[i])
		}
	}
	if f[fAction] != "" {
		e.Str("action", f[fAction])
	} else {
		e.Str("action", actionOf(et))
	}
	a := e.Object("attributes")
	for _, kv := range extra {
		switch {
		case kv[1] == "true":
			a.Bool(kv[0], true)
		case kv[1] == "false":
			a.Bool(kv[0], false)
		case a.NumValue(kv[0], sdk.Text(kv[1])):
		default:
			a.Str(kv[0], kv[1])
		}
	}
	a.End()
	e.End()
}

// actionOf is the last segment of an event type, ".start" and ".end"
// dropped first: "license.checkout.end" gives "checkout".
func actionOf(et string) string {
	et = strings.TrimSuffix(strings.TrimSuffix(et, ".start"), ".end")
	if i := strings.LastIndexByte(et, '.'); i >= 0 {
		return et[i+1:]
	}
	return et
}

// splitPairs splits "k=v k2=\"a b\" flag" into pairs; a bare word is a key
// with the value "true". In a quoted value \" and \\ stand for " and \.
func splitPairs(s string) [][2]string {
	var out [][2]string
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
				out = append(out, [2]string{k, "true"})
			}
			continue
		}
		i++ // '='
		var v string
		if i < len(s) && s[i] == '"' {
			i++
			var b strings.Builder
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
				i++
			}
			i++ // closing quote
			v = b.String()
		} else {
			vs := i
			for i < len(s) && s[i] != ' ' && s[i] != '\t' {
				i++
			}
			v = s[vs:i]
		}
		if k != "" {
			out = append(out, [2]string{k, v})
		}
	}
	return out
}

// memberNames lists the member names of a JSON object's text, unescaped
// (simple escapes only; a name with \u escapes is left out), in order.
func memberNames(obj []byte) []string {
	var names []string
	depth := 0
	expectKey := false
	for i := 0; i < len(obj); i++ {
		switch c := obj[i]; c {
		case '{', '[':
			depth++
			expectKey = depth == 1 && c == '{'
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				expectKey = true
			}
		case '"':
			j := i + 1
			var b strings.Builder
			ok := true
			for j < len(obj) && obj[j] != '"' {
				if obj[j] == '\\' && j+1 < len(obj) {
					j++
					switch obj[j] {
					case 'u':
						ok = false
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					default:
						b.WriteByte(obj[j])
					}
				} else {
					b.WriteByte(obj[j])
				}
				j++
			}
			if expectKey && depth == 1 && ok {
				names = append(names, b.String())
			}
			expectKey = false
			i = j
		}
	}
	return names
}

// escapePath makes a member name one segment of an ABI path.
func escapePath(k string) string {
	if !strings.ContainsAny(k, `.\`) {
		return k
	}
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		if k[i] == '.' || k[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(k[i])
	}
	return b.String()
}

// isSecretName reports whether a member name suggests a credential.
func isSecretName(k string) bool {
	l := strings.ToLower(k)
	for _, s := range []string{"password", "token", "secret", "connection_info", "credential", "passwd"} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}
