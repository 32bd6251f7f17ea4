package openstack

import (
	"strconv"
	"unsafe"

	sdk "github.com/tally-billing/tally-openstack-collector/wasm-sdk"
)

// Usable reports whether v can become a string member: a non-empty string or
// a number.
func Usable(v sdk.Value) bool {
	switch v.Kind() {
	case sdk.String:
		return len(v.Raw()) > 0
	case sdk.Number:
		return true
	}
	return false
}

// First returns the first value among paths that is usable, or a Missing one.
func First(m *sdk.Message, paths ...string) sdk.Value {
	for _, p := range paths {
		if v := m.Get(p); Usable(v) {
			return v
		}
	}
	return sdk.Value{}
}

// WriteStr writes v under key when it is usable (an empty string, null, a
// boolean, an object or an array is left out). It reports whether a member
// was written.
func WriteStr(e *sdk.Event, key string, v sdk.Value) bool {
	if !Usable(v) {
		return false
	}
	return e.StrValue(key, v)
}

// view returns b as a string without copying. The string is valid only while b
// is unchanged; it is only ever handed to the builder, which copies it.
func view(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b)) //nolint:gosec // zero-copy view, valid while b is unchanged; only the builder sees it, and it copies
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

// Text returns the unescaped text of a string value, without allocating for
// the usual value that holds no escape. The result may share memory with the
// message: hand it to the event builder (which copies it), do not keep it.
func Text(v sdk.Value) string {
	if hasEscape(v.Raw()) {
		return v.String()
	}
	return view(v.Raw())
}

// Action derives the action from an event type: what follows prefix, with
// a final ".start" or ".end" removed. ".error" and every other segment stay:
// "compute.instance.resize.confirm.end" with prefix "compute.instance." gives
// "resize.confirm", "volume.create.error" with "volume." gives
// "create.error". It returns "" when eventType does not begin with prefix.
func Action(eventType, prefix string) string {
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

// EventType returns the notification's event type. ok is false when it is
// not a non-empty string: the host refuses an event without an event_type,
// so such an input (which routing by type never sends) yields no event.
func EventType(m *sdk.Message) (et sdk.Value, ok bool) {
	et = m.Get("event_type")
	return et, isEventType(et)
}

// isEventType reports whether et can be an event's event_type: a non-empty
// string.
func isEventType(et sdk.Value) bool {
	return et.Kind() == sdk.String && len(et.Raw()) > 0
}

// Begin begins the one event of a notification whose members a mapper looks
// up one by one (Message.Get): it looks up the event type, adds an event to
// out and writes its header (see WriteHeader). ok is false, and nothing is
// added, when the event type is not a non-empty string (see EventType).
//
//	e, et, ok := openstack.Begin(m, out, "glance", "image")
//	if !ok {
//		return
//	}
//	openstack.WriteSubject(m, e, et, m.Get("payload.id"), m.Get("payload.owner"), m.Get("payload.user_id"), "image.")
//	a := e.Object("attributes")
//	a.Quantity("size_bytes", m.Get("payload.size"))
//	a.End()
//	e.End()
func Begin(m *sdk.Message, out *sdk.Output, service, resourceType string) (e *sdk.Event, et sdk.Value, ok bool) {
	et = m.Get("event_type")
	e, ok = start(out, m.Get("message_id"), m.Get("timestamp"), et, service, resourceType)
	return e, et, ok
}

// The indexes of the header's members in the values of a lookup list built
// by Paths.
const (
	EventTypeAt = iota // event_type
	MessageIDAt        // message_id
	TimestampAt        // timestamp
	// HeaderLen is the number of header members, the index of a mapper's
	// first own path.
	HeaderLen
)

// Paths returns the lookup list of a mapper that looks up its members
// together (Message.GetMany): the members the header is read from
// (event_type, message_id and timestamp, at EventTypeAt, MessageIDAt and
// TimestampAt), then members. It allocates the list: call it once, for a
// package-level variable.
//
//	var paths = openstack.Paths("payload.id", "payload.size")
//
//	const (
//		pID = openstack.HeaderLen + iota
//		pSize
//		nPaths
//	)
func Paths(members ...string) []string {
	return append([]string{"event_type", "message_id", "timestamp"}, members...)
}

// Start begins the one event of a notification whose members a mapper has
// looked up together (Message.GetMany) with a list built by Paths: it adds
// an event to out and writes its header (see WriteHeaderValues) from the
// header's values in v, and returns the event type. ok is false, and
// nothing is added, when the event type is not a non-empty string (see
// EventType).
//
//	var v [nPaths]sdk.Value
//	m.GetMany(paths, v[:])
//	e, et, ok := openstack.Start(out, v[:], "cinder", "volume")
//	if !ok {
//		return
//	}
//	openstack.WriteSubject(m, e, et, v[pID], sdk.Value{}, sdk.Value{}, "volume.")
//	e.End()
func Start(out *sdk.Output, v []sdk.Value, service, resourceType string) (e *sdk.Event, et sdk.Value, ok bool) {
	et = v[EventTypeAt]
	e, ok = start(out, v[MessageIDAt], v[TimestampAt], et, service, resourceType)
	return e, et, ok
}

// start adds an event with its header from the message_id id, the timestamp
// ts and the event type et, unless et is not a non-empty string.
func start(out *sdk.Output, id, ts, et sdk.Value, service, resourceType string) (*sdk.Event, bool) {
	if !isEventType(et) {
		return nil, false
	}
	e := out.Event()
	WriteHeaderValues(e, id, ts, et, service, resourceType, -1)
	return e, true
}

// WriteHeader writes the members every event begins with: event_id,
// timestamp, event_type (et, looked up by the caller), service and
// resource_type. suffix >= 0 marks the event as one of several taken from one
// notification (a bulk payload): its event_id is then "<message_id>:<suffix>"
// so that each stays distinct.
func WriteHeader(m *sdk.Message, e *sdk.Event, et sdk.Value, service, resourceType string, suffix int) {
	WriteHeaderValues(e, m.Get("message_id"), m.Get("timestamp"), et, service, resourceType, suffix)
}

// WriteHeaderValues is WriteHeader with the message_id and timestamp already
// looked up (by a mapper that fetches its members together with
// Message.GetMany).
func WriteHeaderValues(e *sdk.Event, id, ts, et sdk.Value, service, resourceType string, suffix int) {
	switch {
	case suffix < 0:
		WriteStr(e, "event_id", id)
	case Usable(id):
		var b [96]byte
		buf := append(b[:0], Text(id)...)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(suffix), 10)
		e.Str("event_id", view(buf))
	}
	e.Timestamp("timestamp", ts)
	WriteStr(e, "event_type", et)
	e.Str("service", service)
	e.Str("resource_type", resourceType)
}

// WriteAction writes the action derived from the event type et (see
// Action).
func WriteAction(e *sdk.Event, et sdk.Value, prefix string) {
	if et.Kind() != sdk.String {
		return
	}
	if a := Action(Text(et), prefix); a != "" {
		e.Str("action", a)
	}
}

// WriteSubject writes the members that follow the header of every event:
// resource_id (resourceID when usable), project_id (see WriteProject),
// user_id (see WriteUser) and the action derived from the event type et with
// actionPrefix (see WriteAction).
func WriteSubject(m *sdk.Message, e *sdk.Event, et, resourceID, project, user sdk.Value, actionPrefix string) {
	WriteStr(e, "resource_id", resourceID)
	WriteProject(m, e, project)
	WriteUser(m, e, user)
	WriteAction(e, et, actionPrefix)
}

// WriteProject writes project_id: v when usable, else the request context's
// project (_context_project_id, _context_tenant_id, _context_tenant,
// _context_project).
func WriteProject(m *sdk.Message, e *sdk.Event, v sdk.Value) {
	if !Usable(v) {
		v = First(m, "_context_project_id", "_context_tenant_id", "_context_tenant", "_context_project")
	}
	WriteStr(e, "project_id", v)
}

// WriteUser writes user_id: v when usable, else the request context's user
// (_context_user_id, _context_user).
func WriteUser(m *sdk.Message, e *sdk.Event, v sdk.Value) {
	if !Usable(v) {
		v = First(m, "_context_user_id", "_context_user")
	}
	WriteStr(e, "user_id", v)
}

// PathBuf builds lookup paths below a base that is only known at run time
// ("payload.networks.3"), without allocating. The zero value is ready to use
// (its base is empty).
type PathBuf struct {
	b [128]byte
	n int // length of the base
}

// SetBase makes base, followed by index when index >= 0, the start of every
// path.
func (p *PathBuf) SetBase(base string, index int) {
	buf := append(p.b[:0], base...)
	if index >= 0 {
		buf = append(buf, '.')
		buf = strconv.AppendInt(buf, int64(index), 10)
	}
	p.n = len(buf)
}

// At returns "<base>.<member>". The result is valid until the next call.
func (p *PathBuf) At(member string) string {
	buf := append(p.b[:p.n], '.')
	buf = append(buf, member...)
	return view(buf)
}

// Base returns the base path itself. The result is valid until the next call.
func (p *PathBuf) Base() string {
	return view(p.b[:p.n])
}

// IsExists reports whether et is the event type of a periodic audit
// notification ("compute.instance.exists", "volume.exists", "instance.exists"
// ...): the one whose events carry the audit period.
func IsExists(et sdk.Value) bool {
	return et.Equal("exists") || et.HasSuffix(".exists")
}

// WriteAuditPeriod writes, for a periodic audit notification (IsExists(et)),
// audit_period_beginning and audit_period_ending from beginning and ending,
// each as a timestamp (see sdk.Event.Timestamp): a value that is missing,
// null or unparsable is left out. For any other event type it writes
// nothing.
//
//	openstack.WriteAuditPeriod(a, et, v[pAuditBeginning], v[pAuditEnding])
func WriteAuditPeriod(e *sdk.Event, et, beginning, ending sdk.Value) {
	if IsExists(et) {
		writeAuditPeriod(e, beginning, ending)
	}
}

// WritePayloadAuditPeriod is WriteAuditPeriod with the period read from
// payload.audit_period_beginning and payload.audit_period_ending, looked up
// only for a periodic audit notification.
//
//	openstack.WritePayloadAuditPeriod(m, a, et)
func WritePayloadAuditPeriod(m *sdk.Message, e *sdk.Event, et sdk.Value) {
	if IsExists(et) {
		writeAuditPeriod(e, m.Get("payload.audit_period_beginning"), m.Get("payload.audit_period_ending"))
	}
}

// writeAuditPeriod writes the period of a notification known to be a
// periodic audit one.
func writeAuditPeriod(e *sdk.Event, beginning, ending sdk.Value) {
	e.Timestamp("audit_period_beginning", beginning)
	e.Timestamp("audit_period_ending", ending)
}

// Pick returns the first of vs that is usable, or a Missing value: First for
// values already looked up together (sdk.Message.GetMany).
func Pick(vs ...sdk.Value) sdk.Value {
	for _, v := range vs {
		if Usable(v) {
			return v
		}
	}
	return sdk.Value{}
}
