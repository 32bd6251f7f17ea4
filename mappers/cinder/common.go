package main

// This file is the same in every built-in mapper (a test in package mappers
// keeps the copies identical): each mapper stays a self-contained module that
// an operator can copy and change on its own.

import (
	"strconv"
	"unsafe"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// usable reports whether v can become a string member: a non-empty string or
// a number.
func usable(v sdk.Value) bool {
	switch v.Kind() {
	case sdk.String:
		return len(v.Raw()) > 0
	case sdk.Number:
		return true
	}
	return false
}

// first returns the first value among paths that is usable, or a Missing one.
func first(m *sdk.Message, paths ...string) sdk.Value {
	for _, p := range paths {
		if v := m.Get(p); usable(v) {
			return v
		}
	}
	return sdk.Value{}
}

// str writes v under key when it is usable (an empty string, null, a boolean,
// an object or an array is left out).
func str(e *sdk.Event, key string, v sdk.Value) bool {
	if !usable(v) {
		return false
	}
	return e.StrValue(key, v)
}

// view returns b as a string without copying. The string is valid only while b
// is unchanged; it is only ever handed to the builder, which copies it.
func view(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// hasEscape reports whether raw string content holds a JSON escape.
func hasEscape(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' {
			return true
		}
	}
	return false
}

// text returns the unescaped text of a string value, without allocating for
// the usual value that holds no escape.
func text(v sdk.Value) string {
	if hasEscape(v.Raw()) {
		return v.String()
	}
	return view(v.Raw())
}

// actionOf derives the action from an event type: what follows prefix, with
// a final ".start" or ".end" removed. ".error" and every other segment stay:
// "compute.instance.resize.confirm.end" with prefix "compute.instance." gives
// "resize.confirm", "volume.create.error" with "volume." gives
// "create.error". It returns "" when eventType does not begin with prefix.
func actionOf(eventType, prefix string) string {
	if len(eventType) <= len(prefix) || eventType[:len(prefix)] != prefix {
		return ""
	}
	a := eventType[len(prefix):]
	for _, suffix := range [...]string{".start", ".end"} {
		if len(a) > len(suffix) && a[len(a)-len(suffix):] == suffix {
			return a[:len(a)-len(suffix)]
		}
	}
	return a
}

// eventType returns the notification's event type. ok is false when it is
// not a non-empty string: the host refuses an event without an event_type,
// so such an input (which routing by type never sends) yields no event.
func eventType(m *sdk.Message) (et sdk.Value, ok bool) {
	et = m.Get("event_type")
	return et, et.Kind() == sdk.String && len(et.Raw()) > 0
}

// header writes the members every event begins with: event_id, timestamp,
// event_type (et, looked up by the caller), service and resource_type.
// suffix >= 0 marks the event as one of several taken from one notification
// (a bulk payload): its event_id is then "<message_id>:<suffix>" so that each
// stays distinct.
func header(m *sdk.Message, e *sdk.Event, et sdk.Value, service, resourceType string, suffix int) {
	writeHeader(e, m.Get("message_id"), m.Get("timestamp"), et, service, resourceType, suffix)
}

// writeHeader is header with the message_id and timestamp already looked up
// (by a mapper that fetches its members together with Message.GetMany).
func writeHeader(e *sdk.Event, id, ts, et sdk.Value, service, resourceType string, suffix int) {
	switch {
	case suffix < 0:
		str(e, "event_id", id)
	case usable(id):
		var b [96]byte
		buf := append(b[:0], text(id)...)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(suffix), 10)
		e.Str("event_id", view(buf))
	}
	e.Timestamp("timestamp", ts)
	str(e, "event_type", et)
	e.Str("service", service)
	e.Str("resource_type", resourceType)
}

// writeAction writes the action derived from the event type et (see
// actionOf).
func writeAction(e *sdk.Event, et sdk.Value, prefix string) {
	if et.Kind() != sdk.String {
		return
	}
	if a := actionOf(text(et), prefix); a != "" {
		e.Str("action", a)
	}
}

// writeProject writes project_id: the first usable of the payload paths
// given, then the request context (_context_project_id, _context_tenant_id,
// _context_tenant, _context_project).
func writeProject(m *sdk.Message, e *sdk.Event, v sdk.Value) {
	if !usable(v) {
		v = first(m, "_context_project_id", "_context_tenant_id", "_context_tenant", "_context_project")
	}
	str(e, "project_id", v)
}

// writeUser writes user_id: v when usable, else the request context's user
// (_context_user_id, _context_user).
func writeUser(m *sdk.Message, e *sdk.Event, v sdk.Value) {
	if !usable(v) {
		v = first(m, "_context_user_id", "_context_user")
	}
	str(e, "user_id", v)
}

// pathBuf builds lookup paths below a base that is only known at run time
// ("payload.networks.3"), without allocating.
type pathBuf struct {
	b [128]byte
	n int // length of the base
}

// setBase makes base, followed by index when index >= 0, the start of every
// path.
func (p *pathBuf) setBase(base string, index int) {
	buf := append(p.b[:0], base...)
	if index >= 0 {
		buf = append(buf, '.')
		buf = strconv.AppendInt(buf, int64(index), 10)
	}
	p.n = len(buf)
}

// at returns "<base>.<member>". The result is valid until the next call.
func (p *pathBuf) at(member string) string {
	buf := append(p.b[:p.n], '.')
	buf = append(buf, member...)
	return view(buf)
}

// base returns the base path itself. The result is valid until the next call.
func (p *pathBuf) base() string {
	return view(p.b[:p.n])
}
