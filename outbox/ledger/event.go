package ledger

import (
	"hash/fnv"
	"time"

	"github.com/tally-billing/tally-openstack-collector/wasm-sdk/jsonindex"
)

// Event is what the ledger reads from a canonical event.
type Event struct {
	// Key of its intake row (Hour left to the caller: the hour the
	// notification was taken, which the event does not carry).
	Source string
	Type   string
	// Stored is its stored row; Hour is NoHour when the timestamp is
	// unreadable.
	Stored StoredKey
	// Identity hashes (event_id, timestamp), the pair the Reporting API
	// stores an event once for.
	Identity uint64
}

// NoHour is the hour of an unreadable timestamp: no hour (hours are
// multiples of 3600).
const NoHour int64 = -1

// Reader reads canonical events; its zero value is ready. Not safe for
// concurrent use (it reuses its index and its buffer).
//
// The members that key the ledger's rows (exchange, event type, project,
// resource type) take few values, and one Reader reads every event of an
// outbox: it answers the same string for the same value each time, so that
// reading an event allocates only its timestamp.
type Reader struct {
	x     jsonindex.Index
	buf   []byte
	names map[string]string
}

// maxNames bounds the strings a Reader keeps; past it, it starts again.
const maxNames = 4096

// Span is where the content of a string member (between its quotes, as
// written: escapes included) lies in the bytes of an event. The zero Span is
// a member that is absent or not a string: a string's content never starts at
// byte 0, where an event's '{' is.
type Span struct{ Start, End uint32 }

// Keys locates, in the bytes of one canonical event, the members the ledger
// reads: source.exchange, event_type, project_id, resource_type, timestamp
// and event_id. The host's event writer knows where it wrote them and hands
// them over with the event (Keyed), so that the outbox takes the ledger's
// keys from there instead of parsing the event again. The zero Keys says
// nothing: the event is parsed (Read).
type Keys struct {
	Exchange, Type, Project, ResourceType, Timestamp, ID Span
}

// Keyed is a canonical event on its way to the outbox: its bytes and, when
// whoever wrote it knows them, its Keys (else the zero Keys).
type Keyed struct {
	Bytes []byte
	Keys  Keys
}

// Read reads ev. An event that is not JSON yields empty members.
func (r *Reader) Read(ev []byte) Event {
	if r.x.Parse(ev) != nil {
		return Event{Identity: hash(ev, nil), Stored: StoredKey{Hour: NoHour}}
	}
	k := Keys{
		Exchange:     r.span("source.exchange"),
		Type:         r.span("event_type"),
		Project:      r.span("project_id"),
		ResourceType: r.span("resource_type"),
		Timestamp:    r.span("timestamp"),
		ID:           r.span("event_id"),
	}
	return r.read(ev, k)
}

// ReadKeyed reads e.Bytes from its Keys, without parsing it, or parses it
// (Read) when its Keys are zero or do not fit in its bytes. Given the Keys of
// where an event's members are, it answers what Read answers.
func (r *Reader) ReadKeyed(e Keyed) Event {
	if e.Keys == (Keys{}) || !e.Keys.fit(len(e.Bytes)) {
		return r.Read(e.Bytes)
	}
	return r.read(e.Bytes, e.Keys)
}

// fit reports whether every span of k lies within n bytes.
func (k Keys) fit(n int) bool {
	for _, s := range [...]Span{k.Exchange, k.Type, k.Project, k.ResourceType, k.Timestamp, k.ID} {
		if s.Start > s.End || int(s.End) > n {
			return false
		}
	}
	return true
}

// span answers where the string member at path lies in the parsed event
// (the zero Span when it is not a string).
func (r *Reader) span(path string) Span {
	k, s, e := r.x.Lookup(path)
	if k != jsonindex.String {
		return Span{}
	}
	return Span{Start: uint32(s), End: uint32(e)} //nolint:gosec // G115: offsets into one event, which the outbox bounds far below 4 GiB
}

// read reads the members of ev at k: the one place that says what the
// ledger makes of them, whether the event was parsed or its writer said
// where they are.
func (r *Reader) read(ev []byte, k Keys) Event {
	var out Event
	out.Stored.Hour = NoHour
	out.Source = r.name(ev, k.Exchange)
	out.Type = r.name(ev, k.Type)
	out.Stored.Project = r.name(ev, k.Project)
	out.Stored.ResourceType = r.name(ev, k.ResourceType)
	var ts string
	if b, ok := r.unquote(ev, k.Timestamp); ok {
		ts = string(b)
	}
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		out.Stored.Hour = HourOf(t)
	}
	id, _ := r.unquote(ev, k.ID)
	out.Identity = hash(id, []byte(ts))
	return out
}

// unquote answers the string member of ev at s, unquoted into the Reader's
// buffer (valid until the next call), or false when there is none.
func (r *Reader) unquote(ev []byte, s Span) ([]byte, bool) {
	if s == (Span{}) {
		return nil, false
	}
	var err error
	r.buf, err = jsonindex.AppendUnquote(r.buf[:0], ev[s.Start:s.End])
	if err != nil {
		return nil, false
	}
	return r.buf, true
}

// name answers the string member of ev at s ("" when there is none), one
// string per value while fewer than maxNames are kept. A value longer than
// MaxNameBytes is answered as the ledger names it (Name) and not kept, so
// the kept strings take at most maxNames × MaxNameBytes bytes.
func (r *Reader) name(ev []byte, at Span) string {
	b, ok := r.unquote(ev, at)
	if !ok {
		return ""
	}
	if len(b) > MaxNameBytes {
		return Name(string(b))
	}
	if s, ok := r.names[string(b)]; ok {
		return s
	}
	if r.names == nil || len(r.names) >= maxNames {
		r.names = make(map[string]string)
	}
	s := string(b)
	r.names[s] = s
	return s
}

func hash(a, b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(a)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(b)
	return h.Sum64()
}
